# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Talos images: references, the Image Factory, a node's installer and the images in its containerd.

- Image references as containerd stores them (``reference.ParseDockerRef``:
  ``nginx`` is ``docker.io/library/nginx:latest``).
- The Image Factory (github.com/siderolabs/image-factory, docs/api.md): its
  HTTP API (``/versions``, ``/version/<v>/extensions/official``,
  ``/schematics``), schematic IDs (the SHA-256 of the schematic as the
  factory's Go YAML encoder writes it), installer references
  (``<registry>/<platform>-installer[-secureboot]/<schematic>:<version>``) and
  the URLs of its boot assets.
- The default installer of a node: from the node's schematic (so that its
  system extensions survive), its platform and secure boot, as Talos reports
  them; an explicit image always wins.
- The installer reference in a machine config, in either of its homes:
  ``.machine.install.image`` or the ``UnattendedInstallConfig`` document's
  ``installer.image``.
- The images of a node's containerd namespace (``ImageService`` List, Pull and
  Remove, the legacy ``MachineService`` ImageList and ImagePull on nodes older
  than Talos v1.13).

Nothing here sees a Task: functions take a client and plain values and raise
the collection's errors.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import hashlib
import json
import re
import time

from ansible.module_utils.basic import env_fallback

from ansible_collections.talos_linux.talos.plugins.module_utils.errors import (
    TalosConfigError,
    TalosError,
    TalosUnimplementedError,
)
from ansible_collections.talos_linux.talos.plugins.module_utils.node import VERSION, label, normalize_version, parse_version

FACTORY_URL = "https://factory.talos.dev"
# The official factory serves its PXE frontend under its own name.
OFFICIAL_PXE_URL = "https://pxe.talos.dev"
# The schematic without customizations: its canonical form is "customization: {}\n".
EMPTY_SCHEMATIC_ID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
LEGACY_INSTALLER_REPOSITORY = "ghcr.io/siderolabs/installer"
# Talos v1.14 publishes no installer at ghcr.io: installers come from the Image Factory.
FACTORY_INSTALLER_SINCE = (1, 14)
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

# containerd namespaces by the name users give (talosctl --namespace): (driver, namespace) of common.ContainerdInstance.
NAMESPACES = {
    "system": ("CRI", "NS_SYSTEM"),
    "cri": ("CRI", "NS_CRI"),
}

IMAGE_LIST = "machine.ImageService/List"
IMAGE_PULL = "machine.ImageService/Pull"
IMAGE_REMOVE = "machine.ImageService/Remove"
LEGACY_IMAGE_LIST = "machine.MachineService/ImageList"
LEGACY_IMAGE_PULL = "machine.MachineService/ImagePull"

# Seconds a pull may take on one node by default: Talos's own pulls give up after 20 minutes.
PULL_TIMEOUT = 1200

# How often a node's pull progress is reported while it lasts.
PROGRESS_INTERVAL = 5.0
_MIB = 1024.0 * 1024.0

# -- image references -------------------------------------------------------

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_REFERENCE = re.compile(r"^(?P<name>(?:%s/)?%s(?:/%s)*)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[0-9a-fA-F]{32,}))?$"
                        % (_DOMAIN, _COMPONENT, _COMPONENT))


class ImageReference:
    """An image reference normalized as containerd stores it: ``name`` with a ``tag`` or a ``digest``.

    ``str()`` is the name containerd lists: ``name:tag``, or ``name@digest``
    (a tag given with a digest is dropped, as ``reference.ParseDockerRef`` does).
    """

    def __init__(self, name, tag=None, digest=None):
        self.name = name
        self.tag = tag
        self.digest = digest

    def __str__(self):
        return "%s@%s" % (self.name, self.digest) if self.digest else "%s:%s" % (self.name, self.tag)

    def pinned(self, digest):
        """``name@digest``: how Talos names a pulled image."""
        return "%s@%s" % (self.name, digest)


def parse_reference(ref, option="name"):
    """The ImageReference of ``ref``; raises TalosConfigError naming ``option`` when it is no image reference."""
    match = _REFERENCE.match(str(ref or "").strip())
    if not match:
        raise TalosConfigError("%s %r is not an image reference such as registry.example.com/team/app:v1.2.3 "
                               "(lower-case repository path, optional :tag and @sha256:digest)." % (option, ref))
    name, tag, digest = match.group("name"), match.group("tag"), match.group("digest")
    first, _slash, rest = name.partition("/")
    # distribution's splitDockerDomain: a first component without "." or ":" (and not localhost) is a Docker Hub path.
    if not rest or ("." not in first and ":" not in first and first != "localhost" and first.lower() == first):
        name, first, rest = "docker.io/" + name, "docker.io", name
    elif first == "index.docker.io":
        name, first = "docker.io/" + rest, "docker.io"
    if first == "docker.io" and "/" not in rest:
        name = "docker.io/library/" + rest
    if digest:
        return ImageReference(name, digest=digest.lower())
    return ImageReference(name, tag=tag or "latest")


def image_tag(image):
    """The tag of an image reference, or None when it has none.

    ``registry:5000/siderolabs/installer:v1.14.0@sha256:...`` -> ``"v1.14.0"``: the
    digest is dropped and a colon before the last slash belongs to the registry.
    """
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return last.rsplit(":", 1)[1] or None


def registry_host(url):
    """The registry name of a factory URL: ``https://factory.talos.dev`` -> ``factory.talos.dev`` (port kept)."""
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^/?#]+)", url or "")
    if not match:
        raise TalosConfigError("The Image Factory URL %r is not an http(s) URL such as %s." % (url, FACTORY_URL))
    return match.group(1).rsplit("@", 1)[-1]


# -- versions -------------------------------------------------------------------

def _minor(version):
    """``(major, minor)`` of a Talos version, or None."""
    key = parse_version(version)
    return key[:2] if key else None


def version_tag(version, option="talos_version"):
    """``version`` as Talos spells it (``v1.14.0``); TalosConfigError naming ``option`` when it is no version."""
    tag = normalize_version(version)
    if parse_version(tag) is None:
        raise TalosConfigError("%s %r is not a Talos version such as v1.14.0." % (option, version))
    return tag


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
    factory_url=dict(type="str", default=FACTORY_URL, fallback=(env_fallback, ["TALOS_IMAGE_FACTORY_URL"])),
    ca_path=dict(type="path", fallback=(env_fallback, ["REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"])),
    validate_certs=dict(type="bool", default=True),
    use_proxy=dict(type="bool", default=True),
    timeout=dict(type="int", default=30),
)
FACTORY_RANGES = dict(timeout=(1, None))


def factory_from_params(params):
    """The ImageFactory that the options of FACTORY_ARGUMENT_SPEC describe."""
    return ImageFactory(params["factory_url"], ca_path=params["ca_path"], validate_certs=params["validate_certs"],
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
        return ImageFactoryError("The Image Factory at %s cannot be reached (%s): check factory_url, the proxy settings "
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
    from ansible_collections.talos_linux.talos.plugins.module_utils.go_yaml import dump
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
    minor = _minor(version)
    name = "%s-installer" % platform if minor >= PLATFORM_INSTALLER_SINCE else "installer"
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


# -- what a node runs, and its default installer ----------------------------------------------

class NodeBuild:
    """What a node was built from, as it reports it.

    ``platform`` and ``arch`` from ``Version``; ``secure_boot`` from
    ``SecurityStates.talos.dev``; ``extensions`` (names) and the Image Factory
    ``schematic_id`` and ``factory_url`` from ``ExtensionStatuses.runtime.talos.dev``,
    where the factory's virtual ``schematic`` extension carries them on every
    Talos release (v1.14 also shows them as ``ImageFactorySchematics``).
    """

    def __init__(self, version, platform, arch="amd64", secure_boot=False, extensions=(), schematic_id=None, factory_url=None):
        self.version = version
        self.platform = platform or "metal"
        self.arch = arch or "amd64"
        self.secure_boot = secure_boot
        self.extensions = list(extensions)
        self.schematic_id = schematic_id
        self.factory_url = factory_url

    def as_dict(self):
        return {
            "version": self.version, "platform": self.platform, "arch": self.arch, "secure_boot": self.secure_boot,
            "extensions": list(self.extensions), "schematic_id": self.schematic_id, "factory_url": self.factory_url,
        }


def _author_url(author):
    """``Image Factory (https://factory.talos.dev)`` -> ``https://factory.talos.dev`` (Talos's parseAuthor)."""
    index = (author or "").rfind(" (")
    url = author[index + 2:].rstrip(")") if index >= 0 else ""
    return url if re.match(r"^https?://", url) else None


def node_build(version_item, extension_statuses, security_state):
    """The NodeBuild from a ``Version`` reply item, ExtensionStatus resources and the SecurityState resource (or None)."""
    extensions, schematic, factory_url = [], None, None
    for resource in extension_statuses:
        metadata = ((resource.get("spec") or {}).get("metadata")) or {}
        if metadata.get("name") == SCHEMATIC_EXTENSION and metadata.get("version"):
            schematic, factory_url = metadata["version"], _author_url(metadata.get("author"))
        elif metadata.get("name"):
            extensions.append(metadata["name"])
    secure_boot = bool(((security_state or {}).get("spec") or {}).get("secureBoot"))
    return NodeBuild(version_item.version.tag, version_item.platform.name, version_item.version.arch, secure_boot,
                     extensions, schematic, factory_url)


def read_node_build(client, node, version_item=None):
    """Read the NodeBuild of ``node`` (``version_item``: its Version reply item when already read)."""
    if version_item is None:
        version_item = client.call(VERSION, node=node)[0]
    extensions = client.list_resources("runtime", "ExtensionStatuses.runtime.talos.dev", node=node)
    try:
        security = client.get_resource("runtime", "SecurityStates.talos.dev", "securitystate", node=node)
    except TalosError as error:
        # Missing on releases without the resource type; nothing else is worth failing for.
        if error.code not in ("NotFound", "PermissionDenied"):
            raise
        security = None
    return node_build(version_item, extensions, security)


class InstallerChoice:
    """The installer image a node gets, and why (``source`` names the rule, ``reason`` says it in words)."""

    def __init__(self, image, source, reason):
        self.image = image
        self.source = source
        self.reason = reason


def choose_installer(build, target, image=None, image_repository=None, factory_url=None):
    """The installer for upgrading a node of ``build`` to ``target`` (``vX.Y.Z``): an InstallerChoice.

    In order: the explicit ``image``; ``image_repository`` tagged with the
    target; the Image Factory installer of the node's own schematic, platform
    and secure boot (so that its extensions survive) from ``factory_url``, else
    the factory the node was built by, else factory.talos.dev; for a node
    without a schematic, the factory installer of the empty schematic from
    Talos v1.14 on (or when it boots with secure boot) and
    ghcr.io/siderolabs/installer before. A node with system extensions but no
    schematic has no default that keeps them: TalosConfigError.
    """
    target = version_tag(target, "version")
    if image:
        return InstallerChoice(image, "image", "the image option names it")
    if image_repository:
        return InstallerChoice("%s:%s" % (image_repository.rstrip("/"), target), "image_repository",
                               "the image_repository option tagged with the target version")
    platform = build.platform
    secure = " with secure boot" if build.secure_boot else ""
    if build.schematic_id:
        url = factory_url or build.factory_url or FACTORY_URL
        installer = factory_installer(registry_host(url), platform, build.schematic_id, target, build.secure_boot)
        kept = ("its system extensions (%s) are kept" % ", ".join(build.extensions)) if build.extensions else "it has no system extensions"
        return InstallerChoice(installer, "schematic", "the node runs Image Factory schematic %s on platform %s%s, so %s"
                               % (build.schematic_id, platform, secure, kept))
    if build.extensions:
        raise TalosConfigError(
            "The node runs system extensions (%s) that come from no Image Factory schematic, so no default installer keeps "
            "them: set image (or image_repository) to an installer that carries them, for example one made with "
            "talos_image_factory_schematic." % ", ".join(build.extensions))
    if _minor(target) >= FACTORY_INSTALLER_SINCE or build.secure_boot:
        url = factory_url or FACTORY_URL
        installer = factory_installer(registry_host(url), platform, EMPTY_SCHEMATIC_ID, target, build.secure_boot)
        why = ("Talos %s installers come only from the Image Factory" % target if not build.secure_boot
               else "secure boot installers come from the Image Factory")
        return InstallerChoice(installer, "factory", "%s; the node has no schematic, so the empty one, for platform %s%s"
                               % (why, platform, secure))
    return InstallerChoice("%s:%s" % (LEGACY_INSTALLER_REPOSITORY, target), "legacy",
                           "the node has no Image Factory schematic and Talos %s installers are published at %s"
                           % (target, LEGACY_INSTALLER_REPOSITORY))


# -- the installer reference in a machine config -------------------------------------------------

UNATTENDED_INSTALL_KIND = "UnattendedInstallConfig"
# The first Talos release that knows the UnattendedInstallConfig document (talosctl writes it from then on).
UNATTENDED_INSTALL_SINCE = (1, 14)


def installer_homes(documents):
    """Where ``documents`` (a parsed machine config) set an installer image: a list of ``(home, image)``.

    The homes are ``.machine.install.image`` of the v1alpha1 document and
    ``installer.image`` of the UnattendedInstallConfig document (Talos v1.14).
    """
    homes = []
    for document in documents:
        if not isinstance(document, dict):
            continue
        if document.get("version") == "v1alpha1" and "kind" not in document:
            image = (((document.get("machine") or {}).get("install")) or {}).get("image")
            if image:
                homes.append((".machine.install.image", image))
        elif document.get("kind") == UNATTENDED_INSTALL_KIND:
            image = (document.get("installer") or {}).get("image")
            if image:
                homes.append(("UnattendedInstallConfig installer.image", image))
    return homes


def both_install_homes(documents):
    """True when ``documents`` have a ``.machine.install`` section and an UnattendedInstallConfig document.

    Talos refuses such a config whatever either holds: "UnattendedInstallConfig
    config is incompatible with v1alpha1 config (.machine.install)".
    """
    machine_install = any(isinstance(document, dict) and document.get("version") == "v1alpha1" and "kind" not in document
                          and ((document.get("machine") or {}).get("install")) is not None for document in documents)
    unattended = any(isinstance(document, dict) and document.get("kind") == UNATTENDED_INSTALL_KIND for document in documents)
    return machine_install and unattended


def installer_home(documents):
    """The one ``(home, image)`` of ``documents``, or None; TalosConfigError when both homes are set."""
    homes = installer_homes(documents)
    if len(homes) > 1:
        raise TalosConfigError(
            "The machine config sets the installer image in both .machine.install.image (%s) and the "
            "UnattendedInstallConfig document's installer.image (%s); Talos takes only one of them: remove one "
            "before upgrading." % (homes[0][1], homes[1][1]))
    return homes[0] if homes else None


def set_installer(documents, image):
    """Point the installer home of ``documents`` at ``image`` (in place); returns the home, or None when there is none."""
    home = installer_home(documents)
    if home is None:
        return None
    for document in documents:
        if home[0] == ".machine.install.image" and document.get("version") == "v1alpha1" and "kind" not in document:
            document["machine"]["install"]["image"] = image
        elif home[0] != ".machine.install.image" and document.get("kind") == UNATTENDED_INSTALL_KIND:
            document["installer"]["image"] = image
    return home[0]


class InstallerReference:
    """The installer reference of a node's active machine config (``text``): ``home`` and ``image``, None for none.

    Raises TalosConfigError when the config sets both homes.
    """

    def __init__(self, text):
        import yaml
        self.text = text
        self.documents = [document for document in yaml.safe_load_all(text) if document is not None]
        self.home, self.image = installer_home(self.documents) or (None, None)

    def config_naming(self, image):
        """The config text with the installer reference naming ``image``.

        The one ``image:`` line that names the old installer is rewritten, so
        that nothing else of the node's config changes; a config where that
        line is not found once is written out anew from its documents.
        """
        from ansible_collections.talos_linux.talos.plugins.module_utils.machine_config import rewrite_image_line
        rewritten = rewrite_image_line(self.text, self.image, image)
        if rewritten is not None:
            return rewritten
        from ansible_collections.talos_linux.talos.plugins.module_utils.go_yaml import dump_documents
        set_installer(self.documents, image)
        return dump_documents(self.documents)


def read_installer_reference(client, node):
    """The InstallerReference of ``node``'s active machine config (needs os:admin: the config is sensitive)."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.machine_config import read_active_config
    return InstallerReference(read_active_config(client, node))


def point_installer_at(client, node, reference, image):
    """Apply ``node``'s config with its installer reference naming ``image``, without a reboot; True when it changed."""
    from ansible_collections.talos_linux.talos.plugins.module_utils.machine_config import ConfigApplier, load_config
    config = load_config(config=reference.config_naming(image))
    result, _diff = ConfigApplier(client, config, mode="no_reboot").apply(node)
    return result["changed"]


# -- images on nodes -------------------------------------------------------------------

def _containerd(namespace):
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    driver, name = NAMESPACES[namespace]
    return common_pb2.ContainerdInstance(driver=common_pb2.ContainerDriver.Value(driver),
                                         namespace=common_pb2.ContainerdNamespace.Value(name))


def _legacy_namespace(namespace):
    from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.common import common_pb2
    return common_pb2.ContainerdNamespace.Value(NAMESPACES[namespace][1])


def _image_record(message):
    created = message.created_at.ToJsonString() if message.HasField("created_at") else None
    record = {"name": message.name, "digest": message.digest, "size": message.size, "created_at": created}
    if hasattr(message, "labels"):
        record["labels"] = dict(message.labels)
    return record


class _PullProgress:
    """A node's layers during a pull, reported at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, report, node, image):
        self.report = report
        self.node = node
        self.image = image
        self.layers = {}
        self.last = time.monotonic()

    def update(self, message):
        if message.WhichOneof("response") != "pull_progress":
            return
        progress = message.pull_progress.progress
        self.layers[message.pull_progress.layer_id] = (progress.status, progress.offset, progress.total)
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL:
            self.last = now
            done = sum(1 for status, _offset, _total in self.layers.values() if status >= 1)
            have = sum(offset for _status, offset, _total in self.layers.values())
            total = sum(size for _status, _offset, size in self.layers.values())
            self.report("%s: pulling %s: %d of %d layers downloaded, %.1f of %.1f MiB"
                        % (label(self.node), self.image, done, len(self.layers), have / _MIB, total / _MIB))


class NodeImages:
    """The images of one containerd ``namespace`` (``system`` or ``cri``) on several nodes at once.

    Every method returns ``{node: result dict or TalosError}``; nodes older
    than Talos v1.13 are served by the legacy MachineService image API (which
    cannot remove images). ``progress(line)`` hears about slow pulls.
    """

    def __init__(self, client, namespace, max_concurrency=None, progress=None):
        self.client = client
        self.namespace = namespace
        self.max_concurrency = max_concurrency
        self.progress = progress or (lambda line: None)
        # Nodes that answered Unimplemented to ImageService.
        self.legacy = set()

    def list(self, nodes):
        """``{node: [image records] or TalosError}``."""
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, machine_pb2
        listed = self.client.stream_many(IMAGE_LIST, image_pb2.ImageServiceListRequest(containerd=_containerd(self.namespace)),
                                         nodes=nodes, max_concurrency=self.max_concurrency)
        old = [node for node, answer in listed.items() if isinstance(answer, TalosUnimplementedError)]
        if old:
            self.legacy.update(old)
            listed.update(self.client.stream_many(
                LEGACY_IMAGE_LIST, machine_pb2.ImageListRequest(namespace=_legacy_namespace(self.namespace)),
                nodes=old, max_concurrency=self.max_concurrency))
        return dict((node, answer if isinstance(answer, TalosError) else [_image_record(item) for item in answer])
                    for node, answer in listed.items())

    def ensure_present(self, wanted, check_mode=False, timeout=PULL_TIMEOUT):
        """Pull ``wanted[node]`` (an image reference) where it is missing.

        A node's result: ``image`` (as containerd names it), ``changed``,
        ``pulled`` (``name@digest`` the node answered, None when nothing was
        pulled or in check mode) and ``api`` (``image_service`` or ``legacy``).
        """
        references = dict((node, parse_reference(ref)) for node, ref in wanted.items())
        results = {}
        missing = {}
        for node, images in self.list(list(wanted)).items():
            if isinstance(images, TalosError):
                results[node] = images
                continue
            present = str(references[node]) in set(record["name"] for record in images)
            results[node] = {"image": str(references[node]), "namespace": self.namespace, "changed": not present,
                             "pulled": None, "api": "legacy" if node in self.legacy else "image_service"}
            if not present:
                missing.setdefault(str(references[node]), []).append(node)
        if check_mode:
            return results
        for image, nodes in sorted(missing.items()):
            for node, outcome in self._pull(image, nodes, timeout).items():
                if isinstance(outcome, TalosError):
                    results[node] = outcome
                else:
                    results[node]["pulled"] = outcome
        return results

    def _pull(self, image, nodes, timeout):
        """Pull ``image`` on ``nodes`` concurrently: ``{node: pinned name or TalosError}``."""
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2, machine_pb2
        modern = [node for node in nodes if node not in self.legacy]
        legacy = [node for node in nodes if node in self.legacy]
        outcomes = {}
        if modern:
            trackers = dict((node, _PullProgress(self.progress, node, image)) for node in modern)
            names = {}

            def on_message(node, message):
                if message.WhichOneof("response") == "name":
                    names[node] = message.name
                trackers[node].update(message)

            for node in modern:
                self.progress("%s: pulling %s into the %s namespace" % (label(node), image, self.namespace))
            request = image_pb2.ImageServicePullRequest(containerd=_containerd(self.namespace), image_ref=image)
            answers = self.client.stream_many(IMAGE_PULL, request, nodes=modern, deadline=timeout,
                                              max_concurrency=self.max_concurrency, on_message=on_message)
            for node, answer in answers.items():
                outcomes[node] = answer if isinstance(answer, TalosError) else names.get(node, image)
        if legacy:
            request = machine_pb2.ImagePullRequest(namespace=_legacy_namespace(self.namespace), reference=image)
            answers = self.client.call_many(LEGACY_IMAGE_PULL, request, nodes=legacy, deadline=timeout,
                                            max_concurrency=self.max_concurrency)
            for node, answer in answers.items():
                outcomes[node] = answer if isinstance(answer, TalosError) else image
        return outcomes

    def ensure_absent(self, ref, nodes, check_mode=False):
        """Remove the image ``ref`` names from ``nodes``.

        Besides the name itself, its ``name@digest`` and bare digest aliases
        go when no other tag still names the same content. A node's result:
        ``image``, ``changed``, ``removed`` (the names removed, or that would be).
        """
        from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import image_pb2
        reference = parse_reference(ref)
        results = {}
        for node, images in self.list(nodes).items():
            if isinstance(images, TalosError):
                results[node] = images
                continue
            names = _names_to_remove(reference, images)
            results[node] = {"image": str(reference), "namespace": self.namespace, "changed": bool(names), "removed": names}
            if names and node in self.legacy:
                results[node] = TalosUnimplementedError(
                    "%s cannot remove images: ImageService.Remove needs Talos v1.13 or later." % label(node, start=True),
                    code="Unimplemented", node=node)
        if check_mode:
            return results
        for node, result in results.items():
            if isinstance(result, TalosError):
                continue
            for name in result["removed"]:
                try:
                    self.client.call(IMAGE_REMOVE, image_pb2.ImageServiceRemoveRequest(
                        containerd=_containerd(self.namespace), image_ref=name), node=node)
                except TalosError as error:
                    # Gone meanwhile is as good as removed.
                    if error.code != "NotFound":
                        results[node] = error
                        break
        return results


def _names_to_remove(reference, images):
    """The names to remove for ``reference`` from the listed ``images``: none when it is not there."""
    by_name = dict((record["name"], record) for record in images)
    record = by_name.get(str(reference))
    if record is None:
        return []
    digest = record["digest"]
    aliases = set([digest, reference.pinned(digest)]) - set([str(reference)])
    others = [name for name, item in by_name.items() if item["digest"] == digest and name != str(reference) and name not in aliases]
    if others:
        return [str(reference)]
    return [str(reference)] + sorted(name for name in aliases if name in by_name)
