# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An S3 store for the tests of the roles' optional object-storage copies (etcd_backup, etcd_restore).

The roles copy through ``amazon.aws.s3_object``, which needs the ``amazon.aws``
collection and boto3. Neither is a dependency of the collection, and boto3's
botocore pins python-dateutil below 3, which the newest kubernetes client
refuses: they live apart from the test stacks, as on a controller whose
``ansible_python_interpreter`` is another Python.

- ``interpreter()``: a venv (made once, under the user's cache like the stacks)
  with moto's S3 server, boto3 and the collection's own requirements, so that
  the collection's modules run there too (the module door).
- ``amazon_aws()``: the ``amazon.aws`` collection as the ``ansible`` package on
  PyPI ships it, unpacked under ``.cache`` (the release that supports the
  running ansible-core).
- ``S3Store.start()``: moto's S3 server on a free loopback port, with a client
  (``call``) that runs boto3 calls in the venv.
"""

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import zipfile

from ansible.release import __version__ as ansible_core_version

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
_REQUIREMENTS = os.path.join(_ROOT, "requirements.txt")
# moto's S3 server with boto3 (botocore 1.x); a version known to serve what s3_object asks.
_PACKAGES = ["moto[s3,server]>=5.1,<6"]
# The ansible package whose amazon.aws supports the ansible-core line: amazon.aws 10 needs ansible-core 2.17.
_ANSIBLE_FOR_OLD_CORE = "ansible==11.13.0"
_ANSIBLE = "ansible==12.3.0"


class S3StoreError(RuntimeError):
    pass


def _cache_home():
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "talos_linux.talos")


def interpreter():
    """The Python of the S3 venv of the running Python's version, made when missing or when its recipe changed (one
    process at a time: the test workers share it)."""
    venv = os.path.join(_cache_home(), "s3-venv-%d.%d" % sys.version_info[:2])
    with open(_REQUIREMENTS, "rb") as handle:
        recipe = hashlib.sha256(handle.read() + json.dumps([_PACKAGES, sys.version]).encode()).hexdigest()[:16]
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".recipe")
    os.makedirs(_cache_home(), exist_ok=True)
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(marker) or open(marker).read() != recipe:
            subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
            subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", _REQUIREMENTS]
                           + _PACKAGES, check=True)
            with open(marker, "w") as handle:
                handle.write(recipe)
    return python


def amazon_aws(python=sys.executable):
    """A collections path holding ``amazon.aws`` for the running ansible-core."""
    old_core = tuple(int(part) for part in ansible_core_version.split(".")[:2]) < (2, 17)
    requirement = _ANSIBLE_FOR_OLD_CORE if old_core else _ANSIBLE
    target = os.path.join(_ROOT, ".cache", "amazon.aws", requirement.replace("==", "-"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(os.path.join(target, "ansible_collections", "amazon", "aws")):
            download = os.path.join(os.path.dirname(target), "wheels")
            # Only the collection is taken from the wheel: whatever Python the ansible package asks for is no matter.
            subprocess.run([python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                            "--only-binary", ":all:", "--python-version", "3.12", "-d", download, requirement], check=True)
            wheel = os.path.join(download, "%s-py3-none-any.whl" % requirement.replace("==", "-"))
            with zipfile.ZipFile(wheel) as archive:
                members = [name for name in archive.namelist() if name.startswith("ansible_collections/amazon/aws/")]
                archive.extractall(target, members=members)
    return target


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Store:
    """moto's S3 server: ``endpoint_url``, ``python`` (the venv's), ``call(method, **kwargs)`` for boto3 client calls,
    ``stop()``."""

    def __init__(self, python, process, port):
        self.python = python
        self.process = process
        self.endpoint_url = "http://127.0.0.1:%d" % port
        self.credentials = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")

    @classmethod
    def start(cls, state_dir, timeout=60):
        python = interpreter()
        port = _free_port()
        log = open(os.path.join(state_dir, "moto.log"), "wb")
        process = subprocess.Popen([os.path.join(os.path.dirname(python), "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        store = cls(python, process, port)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return store
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    store.stop()
                    raise S3StoreError("moto's S3 server did not start; see %s" % log.name)
                time.sleep(0.1)

    def call(self, method, **kwargs):
        """A boto3 S3 client call against the store, run in the venv; its JSON-able answer (bodies as text)."""
        script = (
            "import boto3, json, sys\n"
            "client = boto3.client('s3', endpoint_url=sys.argv[1])\n"
            "answer = getattr(client, sys.argv[2])(**json.loads(sys.argv[3]))\n"
            "answer.pop('ResponseMetadata', None)\n"
            "body = answer.pop('Body', None)\n"
            "if body is not None: answer['Body'] = body.read().hex()\n"
            "print(json.dumps(answer, default=str))\n"
        )
        env = dict(os.environ, **self.credentials)
        done = subprocess.run([self.python, "-c", script, self.endpoint_url, method, json.dumps(kwargs)], env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise S3StoreError("%s failed: %s" % (method, done.stderr.strip().splitlines()[-1:]))
        return json.loads(done.stdout)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
