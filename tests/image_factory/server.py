# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local Image Factory for tests: the HTTP API of github.com/siderolabs/image-factory (docs/api.md).

Served: ``GET /versions`` (and ``?broken=true``), ``GET /version/<v>/extensions/official``,
``GET /version/<v>/overlays/official``, ``POST /schematics``, ``GET /schematics/<id>``,
``GET|HEAD /image/<schematic>/<version>/<path>`` (paths parsed as the factory's
``internal/profile`` does) and ``GET /pxe/<schematic>/<version>/<platform>-<arch>[-secureboot]``.
Errors are plain-text bodies with a trailing newline, with the factory's codes:
404 for an unknown version or schematic, 400 for a schematic with unknown
fields or an invalid image path.

A schematic's ID is the SHA-256 of its canonical YAML: the factory's Go
structs (``pkg/schematic``) marshalled by Go's yaml encoder (indent 4). The
encoder here is written apart from the collection's so that the two check
each other; the empty schematic has the well-known ID 376567988ad3...
"""

import hashlib
import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

VERSIONS = ["v1.12.6", "v1.13.5", "v1.14.0", "v1.14.1", "v1.15.0-alpha.0"]
BROKEN_VERSIONS = ["v1.13.1"]
_EXTENSIONS = (
    ("siderolabs/iscsi-tools", "v0.2.0", "Sidero Labs", "This system extension provides iscsi-tools."),
    ("siderolabs/qemu-guest-agent", "10.1.2", "Markus Reiter", "This system extension provides the QEMU Guest Agent service."),
    ("siderolabs/util-linux-tools", "2.41.1", "Sidero Labs", "This system extension provides util-linux tools."),
    ("siderolabs/gvisor", "20250505.0", "Sidero Labs", "This system extension provides gVisor using containerd's runtime handler."),
)
_OVERLAYS = (("rpi_generic", "siderolabs/sbc-raspberrypi", "v0.1.5"), ("rock5b", "siderolabs/sbc-rockchip", "v0.1.4"))
_ARCHITECTURES = {"amd64": "amd64", "arm64": "arm64", "x86_64": "amd64", "i386": "amd64"}
_BOOTLOADERS = ("none", "dual-boot", "sd-boot", "grub")


class BadRequest(Exception):
    """400: an invalid schematic or image path."""


class NotFound(Exception):
    """404: an unknown version, schematic or route."""


def _digest(text):
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def official_extensions(version):
    return [{"name": name, "ref": "ghcr.io/%s:%s" % (name, tag), "digest": _digest(name + tag + version),
             "author": author, "description": description}
            for name, tag, author, description in _EXTENSIONS]


def official_overlays(version):
    # Overlays came with Talos v1.7 (talos quirks SupportsOverlay).
    if tuple(int(part) for part in version[1:].split("-")[0].split(".")[:2]) < (1, 7):
        return []
    return [{"name": name, "image": image, "ref": "ghcr.io/%s:%s" % (image, tag), "digest": _digest(image + tag)}
            for name, image, tag in _OVERLAYS]


# -- the schematic as the factory's Go structs marshal it --------------------

def _known(mapping, fields, where):
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise BadRequest("yaml: unmarshal errors:\n  cannot unmarshal !!%s into %s" % (type(mapping).__name__, where))
    for key in mapping:
        if key not in fields:
            raise BadRequest("yaml: unmarshal errors:\n  line 1: field %s not found in type %s" % (key, where))
    return mapping


def canonical(document):
    """The schematic with the Go struct field order, zero values left out (``omitempty``)."""
    top = _known(document, ("owner", "overlay", "customization"), "schematic.Schematic")
    if top.get("owner"):
        raise BadRequest("owner field is only supported in Enterprise edition")
    result = {}
    overlay = _known(top.get("overlay"), ("image", "name", "options"), "schematic.Overlay")
    if overlay.get("image") or overlay.get("name") or overlay.get("options"):
        result["overlay"] = {"image": overlay.get("image") or "", "name": overlay.get("name") or ""}
        if overlay.get("options"):
            result["overlay"]["options"] = overlay["options"]
    custom_in = _known(top.get("customization"), (
        "embeddedMachineConfiguration", "extraKernelArgs", "meta", "systemExtensions", "bootloader", "secureboot", "diskImage",
    ), "schematic.Customization")
    custom = {}
    if custom_in.get("embeddedMachineConfiguration"):
        custom["embeddedMachineConfiguration"] = custom_in["embeddedMachineConfiguration"]
    if custom_in.get("extraKernelArgs"):
        custom["extraKernelArgs"] = list(custom_in["extraKernelArgs"])
    if custom_in.get("meta"):
        meta = []
        for item in custom_in["meta"]:
            item = _known(item, ("key", "value"), "schematic.MetaValue")
            if not isinstance(item.get("key"), int) or not 0 <= item["key"] <= 255:
                raise BadRequest("yaml: unmarshal errors:\n  cannot unmarshal %r into uint8" % (item.get("key"),))
            meta.append({"key": item["key"], "value": item.get("value") or ""})
        custom["meta"] = meta
    extensions = _known(custom_in.get("systemExtensions"), ("officialExtensions",), "schematic.SystemExtensions")
    if extensions.get("officialExtensions"):
        custom["systemExtensions"] = {"officialExtensions": list(extensions["officialExtensions"])}
    if custom_in.get("bootloader") not in (None, "", "none"):
        if custom_in["bootloader"] not in _BOOTLOADERS:
            raise BadRequest("yaml: unmarshal errors:\n  %s does not belong to BootloaderKind values" % custom_in["bootloader"])
        custom["bootloader"] = custom_in["bootloader"]
    secureboot = _known(custom_in.get("secureboot"), ("enrollKeys", "includeWellKnownCertificates"), "schematic.SecureBootCustomization")
    secure = dict((key, secureboot[key]) for key in ("enrollKeys", "includeWellKnownCertificates") if secureboot.get(key))
    if secure:
        custom["secureboot"] = secure
    disk = _known(custom_in.get("diskImage"), ("sectorSize",), "schematic.DiskImageCustomization")
    if disk.get("sectorSize"):
        custom["diskImage"] = {"sectorSize": disk["sectorSize"]}
    result["customization"] = custom
    return result


def _go_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if text == "" or re.match(r"^[-?:,\[\]{}#&*!|>'\"%@`]|[:#] |\s$|^\s", text) or \
            yaml.safe_load(text) != text:
        return "'%s'" % text.replace("'", "''")
    return text


def _go_mapping(mapping, indent, lines, sort=False):
    """Keys at ``indent``, nested blocks four deeper, sequence dashes four deeper than their key (yaml.v3)."""
    pad = " " * indent
    for key in (sorted(mapping) if sort else mapping):
        value = mapping[key]
        if isinstance(value, dict) and value:
            lines.append("%s%s:" % (pad, key))
            _go_mapping(value, indent + 4, lines, sort=sort or key == "options")
        elif isinstance(value, list) and value:
            lines.append("%s%s:" % (pad, key))
            for item in value:
                if isinstance(item, dict):
                    entries = list(item.items())
                    lines.append("%s    - %s: %s" % (pad, entries[0][0], _go_scalar(entries[0][1])))
                    lines.extend("%s      %s: %s" % (pad, name, _go_scalar(inner)) for name, inner in entries[1:])
                else:
                    lines.append("%s    - %s" % (pad, _go_scalar(item)))
        elif isinstance(value, str) and "\n" in value:
            lines.append("%s%s: %s" % (pad, key, "|" if value.endswith("\n") else "|-"))
            lines.extend(("%s    %s" % (pad, line)) if line else "" for line in value.rstrip("\n").split("\n"))
        else:
            lines.append("%s%s: %s" % (pad, key, "{}" if value == {} else _go_scalar(value)))


def marshal(schematic):
    """Go's ``yaml.Marshal`` of the canonical schematic."""
    lines = []
    _go_mapping(schematic, 0, lines)
    return "\n".join(lines) + "\n"


def schematic_id(text):
    return hashlib.sha256(text.encode()).hexdigest()


# -- image paths (image-factory internal/profile ParseFromPath) ----------------------

def _platform_arch(rest):
    platform, _dash, arch = rest.rpartition("-")
    if arch == "secureboot":
        platform, _dash, arch = platform.rpartition("-")
    if not platform or arch not in _ARCHITECTURES:
        raise BadRequest("invalid architecture: %r" % arch)
    return platform


def parse_image_path(path):
    """The kind of asset a ``/image/.../<path>`` names; BadRequest for a path the factory does not serve."""
    if path.startswith("kernel-"):
        if path[len("kernel-"):] not in _ARCHITECTURES:
            raise BadRequest("invalid architecture: %r" % path[len("kernel-"):])
        return "kernel"
    if path.startswith("cmdline-"):
        _platform_arch(path[len("cmdline-"):])
        return "cmdline"
    if path.startswith("initramfs-") and path.endswith(".xz"):
        if path[len("initramfs-"):-3] not in _ARCHITECTURES:
            raise BadRequest("invalid architecture")
        return "initramfs"
    if path.endswith(".iso"):
        _platform_arch(path[:-4])
        return "iso"
    if path.endswith("-uki.efi"):
        _platform_arch(path[:-len("-uki.efi")])
        return "uki"
    if "installer-" in path and path.endswith(".tar"):
        return "installer"
    rest = path
    for suffix in (".tar.gz", ".gz", ".xz", ".zst"):
        if rest.endswith(suffix):
            rest = rest[:-len(suffix)]
            break
    for disk_format in (".raw", ".qcow2", ".vhd", ".ova"):
        if rest.endswith(disk_format):
            _platform_arch(rest[:-len(disk_format)])
            return "disk-image"
    raise BadRequest("invalid profile path: %r" % path)


# -- the HTTP frontend --------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    server_version = "image-factory-test"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    @property
    def factory(self):
        return self.server.factory

    def _send(self, status, body, content_type="text/plain; charset=utf-8", head=False):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _json(self, status, value):
        self._send(status, json.dumps(value) + "\n", "application/json")

    def _dispatch(self, method):
        path, _mark, query = self.path.partition("?")
        body = b""
        if method == "POST":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.factory.requests.append((method, self.path))
        try:
            self._route(method, path, query, body)
        except BadRequest as error:
            self._send(400, "%s\n" % error)
        except NotFound as error:
            self._send(404, "%s\n" % error)

    def _version(self, tag):
        tag = tag if tag.startswith("v") else "v" + tag
        if tag not in self.factory.versions:
            raise NotFound("version %s is not available" % tag[1:])
        return tag

    def _schematic(self, schematic):
        if schematic not in self.factory.schematics:
            raise NotFound("schematic not found")

    def _route(self, method, path, query, body):
        parts = [part for part in path.split("/") if part]
        if method == "GET" and parts == ["versions"]:
            return self._json(200, BROKEN_VERSIONS if "broken=true" in query else self.factory.versions)
        if method == "GET" and len(parts) == 4 and parts[0] == "version" and parts[2:] == ["extensions", "official"]:
            return self._json(200, official_extensions(self._version(parts[1])))
        if method == "GET" and len(parts) == 4 and parts[0] == "version" and parts[2:] == ["overlays", "official"]:
            return self._json(200, official_overlays(self._version(parts[1])))
        if method == "POST" and parts == ["schematics"]:
            try:
                document = yaml.safe_load(body.decode() or "{}")
            except yaml.YAMLError as error:
                raise BadRequest("yaml: %s" % " ".join(str(error).split()))
            text = marshal(canonical(document or {}))
            identifier = schematic_id(text)
            self.factory.schematics[identifier] = text
            return self._json(201, {"id": identifier, "schematic": text})
        if method == "GET" and len(parts) == 2 and parts[0] == "schematics":
            if parts[1] not in self.factory.schematics:
                return self._send(404, "schematic not found\n")
            return self._send(200, self.factory.schematics[parts[1]], "application/yaml")
        if method in ("GET", "HEAD") and len(parts) == 4 and parts[0] == "image":
            self._schematic(parts[1])
            self._version(parts[2])
            kind = parse_image_path(parts[3])
            return self._send(200, ("%s %s\n" % (kind, parts[3])).encode(), "application/octet-stream", head=method == "HEAD")
        if method == "GET" and len(parts) == 4 and parts[0] == "pxe":
            self._schematic(parts[1])
            version = self._version(parts[2])
            platform = _platform_arch(parts[3])
            arch = parts[3].replace("-secureboot", "").rsplit("-", 1)[1]
            base = "%s/image/%s/%s" % (self.factory.url, parts[1], version)
            if parts[3].endswith("-secureboot"):
                script = "#!ipxe\nkernel %s/%s-%s-secureboot.uki.efi\nboot\n" % (base, platform, arch)
            else:
                script = "#!ipxe\nkernel %s/kernel-%s talos.platform=%s\ninitrd %s/initramfs-%s.xz\nboot\n" % (
                    base, arch, platform, base, arch)
            return self._send(200, script)
        raise NotFound("404 page not found")

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")


class ImageFactoryServer:
    """A local Image Factory on 127.0.0.1: ``url``, ``requests`` (method, path) and ``schematics`` (id -> YAML).

    ``tls_files`` = (certificate, key) serves HTTPS; ``versions`` replaces the Talos versions offered; ``port``
    0 picks a free one.
    """

    def __init__(self, tls_files=None, versions=None, port=0):
        self.versions = list(versions or VERSIONS)
        self.schematics = {}
        self.requests = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.factory = self
        self._httpd.daemon_threads = True
        scheme = "http"
        if tls_files:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls_files)
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
            scheme = "https"
        self.url = "%s://127.0.0.1:%d" % (scheme, self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="image-factory", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()

    def add_schematic(self, document):
        """Store a schematic as POST /schematics does; returns its ID."""
        text = marshal(canonical(document))
        identifier = schematic_id(text)
        self.schematics[identifier] = text
        return identifier

    def posts(self):
        return [path for method, path in self.requests if method == "POST"]


def write_tls_files(directory):
    """A CA and a certificate for 127.0.0.1 signed by it: ``(ca_path, cert_path, key_path)``."""
    import datetime
    import ipaddress
    import os
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "image factory test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [os.path.join(str(directory), name) for name in ("factory-ca.pem", "factory.pem", "factory-key.pem")]
    with open(paths[0], "wb") as handle:
        handle.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[2], "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return tuple(paths)
