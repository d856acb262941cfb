# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Image Factory (github.com/siderolabs/image-factory, docs/api.md).

- Its HTTP API (``/versions``, ``/version/<v>/extensions/official``,
  ``/schematics``), reached through Ansible's HTTP client.
- Schematics and their IDs (the SHA-256 of the schematic as the factory's Go
  YAML encoder writes it).
- Its installer references
  (``<registry>/<platform>-installer[-secureboot]/<schematic>:<version>``) and
  the URLs of its boot assets.

Which installer a node gets is images/installer.py's; nothing here sees a Task:
functions take plain values and raise the collection's errors.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import re

from ansible.module_utils.basic import env_fallback

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError, TalosError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.reference import version_tag
from ansible_collections.talos_linux.talos.plugins.module_utils.nodes.node import runs_at_least

FACTORY_URL = "https://factory.talos.dev"
# The official factory serves its PXE frontend under its own name.
OFFICIAL_PXE_URL = "https://pxe.talos.dev"
# The schematic without customizations: its canonical form is "customization: {}\n".
EMPTY_SCHEMATIC_ID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
# Before Talos v1.10 the factory names its installers installer[-secureboot], from then on <platform>-installer.
PLATFORM_INSTALLER_SINCE = (1, 10)

# The virtual extension an Image Factory build carries: its version is the schematic ID and
# its author "Image Factory (<factory URL>)" (image-factory internal/artifacts/schematic.go).
SCHEMATIC_EXTENSION = "schematic"

# Disk image suffix of each platform (talos pkg/machinery/platforms); None: no disk image.
DISK_IMAGE_SUFFIXES = {
    "metal": "raw.zst",
    "aws": "raw.xz",
    "gcp": "raw.tar.gz",
    "equinixMetal": None,
    "azure": "vhd.xz",
    "digital-ocean": "raw.gz",
    "nocloud": "raw.xz",
    "openstack": "raw.xz",
    "vmware": "ova",
    "akamai": "raw.gz",
    "cloudstack": "raw.gz",
    "hcloud": "raw.xz",
    "oracle": "qcow2",
    "upcloud": "raw.xz",
    "vultr": None,
    "exoscale": "qcow2",
    "opennebula": "raw.zst",
    "scaleway": "raw.zst",
    "alibabacloud": "qcow2",
}
ARCHITECTURES = ("amd64", "arm64")


def registry_host(url):
    """The registry name of a factory URL: ``https://factory.talos.dev`` -> ``factory.talos.dev`` (port kept)."""
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^/?#]+)", url or "")
    if not match:
        raise TalosConfigError("The Image Factory URL %r is not an http(s) URL such as %s." % (url, FACTORY_URL))
    return match.group(1).rsplit("@", 1)[-1]


# -- the Image Factory -----------------------------------------------------------

class ImageFactoryError(TalosError):
    """The Image Factory could not be reached or refused a request; ``status`` is the HTTP status, if any."""

    def __init__(self, message, status=None, server_message=None):
        super(ImageFactoryError, self).__init__(message, server_message=server_message)
        self.status = status

    def to_result(self):
        result = super(ImageFactoryError, self).to_result()
        if self.status:
            result["status"] = self.status
        return result


# The options of every module that talks to an Image Factory (doc fragment talos_linux.talos.image_factory).
FACTORY_ARGUMENT_SPEC = dict(
    image_factory_url=dict(type="str", default=FACTORY_URL, fallback=(env_fallback, ["TALOS_IMAGE_FACTORY_URL"])),
    ca_path=dict(type="path", fallback=(env_fallback, ["REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"])),
    validate_certs=dict(type="bool", default=True),
    use_proxy=dict(type="bool", default=True),
    timeout=dict(type="int", default=30),
)
FACTORY_RANGES = dict(timeout=(1, None))
FACTORY_OPTIONS = (FACTORY_ARGUMENT_SPEC, FACTORY_RANGES)  # TaskSpec(shared_options=...)


def factory_from_params(params):
    """The ImageFactory that the options of FACTORY_ARGUMENT_SPEC describe."""
    return ImageFactory(params["image_factory_url"], ca_path=params["ca_path"], validate_certs=params["validate_certs"],
                        use_proxy=params["use_proxy"], timeout=params["timeout"])


class ImageFactory:
    """The HTTP API of an Image Factory at ``url``.

    Proxies come from the environment as for every Ansible HTTP client
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``; ``use_proxy=False`` ignores
    them); ``ca_path`` names the CA bundle that signed the factory's
    certificate (else the system's, or ``SSL_CERT_FILE``).
    """

    def __init__(self, url=FACTORY_URL, ca_path=None, validate_certs=True, use_proxy=True, timeout=30):
        self.url = (url or FACTORY_URL).rstrip("/")
        registry_host(self.url)
        self.ca_path = ca_path
        self.validate_certs = validate_certs
        self.use_proxy = use_proxy
        self.timeout = timeout

    @property
    def registry(self):
        """The registry its installers are pulled from: the factory's own host."""
        return registry_host(self.url)

    def _request(self, method, path, body=None, content_type=None, missing_ok=False):
        """``(status, body text)``; None for a 404 when ``missing_ok``; ImageFactoryError otherwise."""
        # Imported here: the modules that only read nodes never pay for the HTTP stack.
        from urllib.error import HTTPError, URLError
        from ansible.module_utils.urls import ConnectionError as RequestError, SSLValidationError, open_url
        url = self.url + path
        headers = {"Accept": "application/json, application/yaml, text/plain"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response = open_url(url, data=body, method=method, headers=headers, timeout=self.timeout,
                                validate_certs=self.validate_certs, use_proxy=self.use_proxy, ca_path=self.ca_path,
                                http_agent="ansible-talos_linux.talos")
            return response.getcode(), response.read().decode("utf-8")
        except HTTPError as error:
            text = _error_text(error)
            if missing_ok and error.code == 404:
                return None
            raise ImageFactoryError("The Image Factory at %s answered %s %s to %s %s%s." % (
                self.url, error.code, error.reason or "", method, path, ": %s" % text.rstrip(".") if text else ""),
                status=error.code, server_message=text or None)
        except (URLError, OSError, ValueError, RequestError) as error:
            raise self._unreachable(error, isinstance(error, SSLValidationError))

    def _unreachable(self, error, certificate=False):
        reason = getattr(error, "reason", None) or error
        text = " ".join(str(reason).split()).rstrip(".")
        if certificate or "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            return ImageFactoryError("The TLS certificate of the Image Factory at %s could not be verified (%s): set ca_path "
                                     "(or REQUESTS_CA_BUNDLE / SSL_CERT_FILE) to the CA bundle that signed it."
                                     % (self.url, text[:300]))
        return ImageFactoryError("The Image Factory at %s cannot be reached (%s): check image_factory_url, the proxy settings "
                                 "(HTTPS_PROXY, NO_PROXY) and that this host can reach it." % (self.url, text[:300]))

    def _json(self, path):
        _status, text = self._request("GET", path)
        try:
            return json.loads(text)
        except ValueError:
            raise ImageFactoryError("The Image Factory at %s answered GET %s with something that is not JSON; is %s an "
                                    "Image Factory?" % (self.url, path, self.url))

    def versions(self):
        """The Talos versions the factory builds images of, oldest first (``["v1.13.0", ...]``)."""
        return list(self._json("/versions"))

    def extensions(self, version):
        """The official system extensions for ``version``: ``[{name, ref, digest, author, description}]``."""
        return list(self._json("/version/%s/extensions/official" % version_tag(version)))

    def overlays(self, version):
        """The official overlays for ``version``: ``[{name, image, ref, digest}]``."""
        return list(self._json("/version/%s/overlays/official" % version_tag(version)))

    def schematic(self, schematic_id):
        """The canonical YAML of a schematic the factory holds, or None when it holds none with that ID."""
        answer = self._request("GET", "/schematics/%s" % schematic_id, missing_ok=True)
        return None if answer is None else answer[1]

    def create_schematic(self, schematic_text):
        """Store a schematic (its canonical YAML): ``(id, canonical YAML)`` as the factory answers."""
        _status, text = self._request("POST", "/schematics", body=schematic_text.encode("utf-8"),
                                      content_type="application/yaml")
        try:
            answer = json.loads(text)
            return answer["id"], answer.get("schematic", schematic_text)
        except (ValueError, KeyError, TypeError):
            raise ImageFactoryError("The Image Factory at %s answered POST /schematics without a schematic ID." % self.url)

    def check_extensions(self, names, version):
        """Raise ImageFactoryError naming every extension of ``names`` that is not official for ``version``."""
        official = set(extension["name"] for extension in self.extensions(version))
        unknown = [name for name in names if name not in official]
        if unknown:
            raise ImageFactoryError("The Image Factory at %s has no official extension %s for Talos %s; names look like "
                                    "siderolabs/iscsi-tools (list them with talos_image_factory_info)."
                                    % (self.url, ", ".join(unknown), version_tag(version)))


def _error_text(error):
    try:
        text = error.read().decode("utf-8", "replace")
    except Exception:
        text = ""
    return " ".join(text.split())[:500]


# -- schematics ---------------------------------------------------------------------

# The fields of a schematic in the order of the factory's Go structs (pkg/schematic), which decides its ID.
_CUSTOMIZATION_FIELDS = ("embeddedMachineConfiguration", "extraKernelArgs", "meta", "systemExtensions", "bootloader",
                         "secureboot", "diskImage")
_BOOTLOADERS = ("auto", "none", "dual-boot", "sd-boot", "grub")
_ENROLL_KEYS = ("off", "manual", "if-safe", "force")


def _fields(mapping, allowed, where):
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise TalosConfigError("schematic %s must be a mapping." % where)
    unknown = sorted(str(key) for key in mapping if key not in allowed)
    if unknown:
        raise TalosConfigError("schematic %s has unknown field %s; the Image Factory knows %s."
                               % (where, ", ".join(unknown), ", ".join(allowed)))
    return mapping


def _strings(value, where):
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise TalosConfigError("schematic %s must be a list of non-empty strings." % where)
    return list(value)


def canonical_schematic(schematic):
    """``schematic`` (as the factory takes it) with the factory's field order and without empty values.

    Raises TalosConfigError for a field the factory would refuse. The result
    dumped with go_yaml is the factory's canonical text (``schematic_text``).
    """
    top = _fields(schematic, ("overlay", "customization"), "")
    customization = _fields(top.get("customization"), _CUSTOMIZATION_FIELDS, "customization")
    result = {}
    overlay = _fields(top.get("overlay"), ("image", "name", "options"), "overlay")
    if any(overlay.get(key) for key in ("image", "name", "options")):
        if not overlay.get("image") or not overlay.get("name"):
            raise TalosConfigError("schematic overlay needs both image and name, for example image: siderolabs/sbc-raspberrypi "
                                   "and name: rpi_generic.")
        result["overlay"] = {"image": str(overlay["image"]), "name": str(overlay["name"])}
        if overlay.get("options"):
            if not isinstance(overlay["options"], dict):
                raise TalosConfigError("schematic overlay.options must be a mapping.")
            result["overlay"]["options"] = _sorted_mapping(overlay["options"])
    custom = {}
    if customization.get("embeddedMachineConfiguration"):
        custom["embeddedMachineConfiguration"] = str(customization["embeddedMachineConfiguration"])
    if customization.get("extraKernelArgs"):
        custom["extraKernelArgs"] = _strings(customization["extraKernelArgs"], "customization.extraKernelArgs")
    if customization.get("meta"):
        custom["meta"] = [_meta_value(item, index) for index, item in enumerate(customization["meta"])]
    extensions = _fields(customization.get("systemExtensions"), ("officialExtensions",), "customization.systemExtensions")
    if extensions.get("officialExtensions"):
        custom["systemExtensions"] = {"officialExtensions": _strings(extensions["officialExtensions"],
                                                                     "customization.systemExtensions.officialExtensions")}
    bootloader = customization.get("bootloader")
    if bootloader not in (None, "") + _BOOTLOADERS:
        raise TalosConfigError("schematic customization.bootloader must be one of %s, got %r." % (", ".join(_BOOTLOADERS), bootloader))
    if bootloader not in (None, "", "auto", "none"):
        custom["bootloader"] = bootloader
    secureboot = _fields(customization.get("secureboot"), ("enrollKeys", "includeWellKnownCertificates"), "customization.secureboot")
    secureboot_custom = {}
    if secureboot.get("enrollKeys"):
        if secureboot["enrollKeys"] not in _ENROLL_KEYS:
            raise TalosConfigError("schematic customization.secureboot.enrollKeys must be one of %s, got %r."
                                   % (", ".join(_ENROLL_KEYS), secureboot["enrollKeys"]))
        secureboot_custom["enrollKeys"] = secureboot["enrollKeys"]
    if secureboot.get("includeWellKnownCertificates"):
        secureboot_custom["includeWellKnownCertificates"] = True
    if secureboot_custom:
        custom["secureboot"] = secureboot_custom
    disk_image = _fields(customization.get("diskImage"), ("sectorSize",), "customization.diskImage")
    if disk_image.get("sectorSize"):
        custom["diskImage"] = {"sectorSize": _non_negative(disk_image["sectorSize"], "customization.diskImage.sectorSize")}
    result["customization"] = custom
    return result


def _meta_value(item, index):
    where = "customization.meta[%d]" % index
    item = _fields(item, ("key", "value"), where)
    key = item.get("key")
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= 255:
        raise TalosConfigError("schematic %s.key must be a number from 0 to 255 (0x0a is 10), got %r." % (where, key))
    return {"key": key, "value": "" if item.get("value") is None else str(item["value"])}


def _non_negative(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TalosConfigError("schematic %s must be a non-negative number, got %r." % (where, value))
    return value


def _sorted_mapping(value):
    """Mappings with their keys sorted, as Go's encoder writes a map."""
    if isinstance(value, dict):
        return dict((key, _sorted_mapping(value[key])) for key in sorted(value, key=str))
    if isinstance(value, list):
        return [_sorted_mapping(item) for item in value]
    return value


def schematic_from_options(extensions=None, extra_kernel_args=None, meta=None, overlay=None, secureboot=None,
                           bootloader=None, embedded_machine_configuration=None, disk_image_sector_size=None):
    """The schematic (the factory's field names) for the module options, not yet canonical."""
    secureboot = secureboot or {}
    overlay = overlay or {}
    return {
        "overlay": {"image": overlay.get("image"), "name": overlay.get("name"), "options": overlay.get("options")},
        "customization": {
            "embeddedMachineConfiguration": embedded_machine_configuration,
            "extraKernelArgs": extra_kernel_args or None,
            "meta": [{"key": item.get("key"), "value": item.get("value")} for item in meta or ()] or None,
            "systemExtensions": {"officialExtensions": extensions or None},
            "bootloader": bootloader,
            "secureboot": {"enrollKeys": secureboot.get("enroll_keys"),
                           "includeWellKnownCertificates": secureboot.get("include_well_known_certificates")},
            "diskImage": {"sectorSize": disk_image_sector_size},
        },
    }


def schematic_text(canonical):
    """The canonical YAML text of a canonical schematic, as the factory's Go encoder writes it."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.common.go_yaml import dump
    return dump(canonical)


def schematic_id(canonical):
    """The ID the factory gives a schematic: the SHA-256 of its canonical text."""
    return hashlib.sha256(schematic_text(canonical).encode("utf-8")).hexdigest()


def schematic_extensions(canonical):
    return list(((canonical.get("customization") or {}).get("systemExtensions") or {}).get("officialExtensions") or [])


# -- installers and boot assets ------------------------------------------------------------

def factory_installer(registry, platform, schematic, version, secure_boot=False):
    """The factory's installer reference for a node of ``platform`` (``metal`` for bare metal)."""
    version = version_tag(version)
    name = "%s-installer" % platform if runs_at_least(version, PLATFORM_INSTALLER_SINCE) else "installer"
    return "%s/%s%s/%s:%s" % (registry, name, "-secureboot" if secure_boot else "", schematic, version)


def boot_assets(factory_url, schematic, version, platform="metal", arch="amd64", pxe_url=None):
    """The URLs of a schematic's boot assets for ``version``, ``platform`` and ``arch``, plain and secure boot.

    Paths follow the factory's ``/image/<schematic>/<version>/<path>`` and
    ``/pxe/<schematic>/<version>/<platform>-<arch>[-secureboot]``; an asset the
    platform has not (no disk image) is None.
    """
    version = version_tag(version)
    if arch not in ARCHITECTURES:
        raise TalosConfigError("architecture must be one of %s, got %r." % (", ".join(ARCHITECTURES), arch))
    factory_url = factory_url.rstrip("/")
    if pxe_url is None:
        pxe_url = OFFICIAL_PXE_URL if factory_url == FACTORY_URL else factory_url
    image = "%s/image/%s/%s/" % (factory_url, schematic, version)
    pxe = "%s/pxe/%s/%s/" % (pxe_url.rstrip("/"), schematic, version)
    suffix = DISK_IMAGE_SUFFIXES.get(platform, "raw.xz")
    base = "%s-%s" % (platform, arch)
    return {
        "iso": image + base + ".iso",
        "disk_image": image + "%s.%s" % (base, suffix) if suffix else None,
        "pxe": pxe + base,
        "kernel": image + "kernel-%s" % arch,
        "initramfs": image + "initramfs-%s.xz" % arch,
        "cmdline": image + "cmdline-%s" % base,
        "uki": image + base + "-uki.efi",
        "installer_tarball": image + "%s-installer-%s.tar" % (platform, arch),
        "secureboot": {
            "iso": image + base + "-secureboot.iso",
            "disk_image": image + "%s-secureboot.%s" % (base, suffix) if suffix else None,
            "pxe": pxe + base + "-secureboot",
            "uki": image + base + "-secureboot-uki.efi",
            "cmdline": image + "cmdline-%s-secureboot" % base,
            "installer_tarball": image + "%s-installer-%s-secureboot.tar" % (platform, arch),
        },
    }
