# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What AWX does around ansible-runner, reproduced so that tests run jobs the way AWX runs them.

AWX's own behaviour, followed here:

- A custom credential type is checked when it is saved: the ``injectors``
  mapping has only ``file`` (keys ``template`` or ``template.NAME``), ``env``
  (shell names, not ``ANSIBLE_*``) and ``extra_vars``; every template renders in
  Jinja2's ``ImmutableSandboxedEnvironment`` with ``StrictUndefined`` when every
  input field is the string ``EXAMPLE``.
- At launch the injectors render in the same sandbox with the default
  ``Undefined``: the namespace holds the credential's *non-empty* inputs by field
  id and ``tower``. Each ``file`` template is written to
  ``mkstemp(dir=<private data dir>/env)`` (mode 0600); ``template.NAME`` makes
  ``tower.filename.NAME`` (``template`` alone: ``tower.filename``) the file's path
  *inside the execution environment*, where the private data dir is ``/runner``.
  ``env`` templates render after the files.
- The job's private data dir holds ``project/`` (the project's files),
  ``inventory/hosts`` (an executable script printing the inventory as JSON,
  ``_meta.hostvars`` included), ``env/extravars`` (AWX's ``awx_*`` variables and
  the survey answers), ``env/cmdline`` (``--check``, ``--diff``, ``--forks``...)
  and the environment. Controller and execution node talk through
  ``ansible-runner transmit | ansible-runner worker | ansible-runner process``:
  the worker unpacks the private data dir into its own directory and runs
  ansible-playbook there; the controller's side processes the event stream and
  keeps the artifacts (``job_events/``, ``fact_cache/`` with fact storage on).

Here the worker is an ``ansible-runner worker`` process with a clean environment
(PATH with no talosctl, an empty HOME) and its own directory standing for
``/runner``.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import json
import os
import re
import stat
import subprocess
import sys
import tempfile

import ansible_runner
import yaml
from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The credential type's two parts, each as it is pasted into AWX's form.
CREDENTIAL_TYPE_FILES = dict((part, os.path.join(REPO, "docs", "awx", "credential_type_%s.yml" % part))
                             for part in ("inputs", "injectors"))
# The execution environment's programs (ansible-runner, ansible-playbook, python3): the test
# venv's, or another one's with TALOS_AWX_EE_BIN (for example a newer ansible-core on a newer Python).
EE_BIN = os.environ.get("TALOS_AWX_EE_BIN") or os.path.dirname(sys.executable)
# Keys of the secrets bundle whose values are secret.
SECRET_KEYS = {"key", "secret", "token", "bootstraptoken", "secretboxencryptionsecret", "aescbcencryptionsecret"}


class CredentialType(object):
    """A custom credential type as AWX stores, validates and injects it."""

    def __init__(self, definition):
        self.inputs = definition["inputs"]
        self.injectors = definition["injectors"]

    @classmethod
    def load(cls, paths=None):
        """The credential type from its Input configuration and Injector configuration files."""
        definition = {}
        for part, path in (paths or CREDENTIAL_TYPE_FILES).items():
            with open(path) as text:
                definition[part] = yaml.safe_load(text)
        return cls(definition)

    @property
    def field_ids(self):
        return [field["id"] for field in self.inputs.get("fields", [])]

    @property
    def secret_fields(self):
        return [field["id"] for field in self.inputs.get("fields", []) if field.get("secret")]

    def validate(self):
        """AWX's checks when the credential type is saved; raises ValueError."""
        if sorted(set(self.field_ids)) != sorted(self.field_ids):
            raise ValueError("field ids are not unique")
        for field in self.inputs.get("fields", []):
            if field.get("type", "string") not in ("string", "boolean"):
                raise ValueError("field %s has an unknown type" % field["id"])
        unknown = set(self.injectors) - {"file", "env", "extra_vars"}
        if unknown:
            raise ValueError("unknown injector kinds: %s" % sorted(unknown))
        files = list(self.injectors.get("file", {}))
        for name in files:
            if name != "template" and not (name.startswith("template.") and name[len("template."):].isidentifier()):
                raise ValueError("file injector %r is not template or template.NAME" % name)
        if "template" in files and len(files) > 1:
            raise ValueError("several files need the template.NAME form")
        for name, value in self.injectors.get("env", {}).items():
            if not name.isidentifier() or name.startswith("ANSIBLE_"):
                raise ValueError("environment variable %s is not allowed" % name)
            if not value.isascii():
                raise ValueError("environment variable %s must be ASCII" % name)
        namespace = dict((field, "EXAMPLE") for field in self.field_ids)
        namespace["tower"] = _Namespace(filename="EXAMPLE_FILENAME" if files == ["template"] else _Namespace(
            **dict((name.split(".", 1)[1], "EXAMPLE_FILENAME") for name in files)))
        strict = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
        for kind in ("file", "env", "extra_vars"):
            for template in self.injectors.get(kind, {}).values():
                strict.from_string(template).render(namespace)

    def inject(self, inputs, private_data_dir, container_root="/runner"):
        """Write the files and return ``(env, safe_env)`` as AWX does when a job starts.

        ``container_root`` is where the execution node sees ``private_data_dir``.
        """
        sandbox = ImmutableSandboxedEnvironment()
        namespace, safe_namespace = {}, {}
        for name, value in inputs.items():
            if isinstance(value, bool):
                namespace[name] = safe_namespace[name] = value
                continue
            if value:
                namespace[name] = value
                safe_namespace[name] = "**********" if name in self.secret_fields else value
        tower = _Namespace()
        namespace["tower"] = safe_namespace["tower"] = tower
        files = {}
        for label, template in self.injectors.get("file", {}).items():
            data = sandbox.from_string(template).render(**namespace)
            handle, path = tempfile.mkstemp(dir=os.path.join(private_data_dir, "env"))
            with os.fdopen(handle, "w") as injected:
                injected.write(data)
            os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
            in_container = os.path.join(container_root, os.path.relpath(path, private_data_dir))
            if "." in label:
                files[label.split(".", 1)[1]] = in_container
            else:
                tower.filename = in_container
        if files:
            tower.filename = _Namespace(**files)
        env, safe_env = {}, {}
        for name, template in self.injectors.get("env", {}).items():
            env[name] = sandbox.from_string(template).render(**namespace)
            safe_env[name] = sandbox.from_string(template).render(**safe_namespace)
        return env, safe_env


class _Namespace(object):
    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def inventory_script(groups, hostvars, group_vars=None):
    """``inventory/hosts`` as AWX writes it: an executable script printing the inventory JSON."""
    data = {"all": {"children": sorted(groups), "vars": group_vars or {}}, "_meta": {"hostvars": hostvars}}
    for group, hosts in groups.items():
        data[group] = {"hosts": list(hosts)}
    return "#! /usr/bin/env python3\n# -*- coding: utf-8 -*-\nprint(%r)\n" % json.dumps(data)


class Job(object):
    """One job run: the private data dir AWX prepares, run through transmit | worker | process."""

    def __init__(self, base_dir, job_id=42):
        self.job_id = job_id
        self.private_data_dir = os.path.join(str(base_dir), "awx_%d_controller" % job_id)
        self.worker_dir = os.path.join(str(base_dir), "awx_%d_runner" % job_id)
        self.home = os.path.join(str(base_dir), "awx_%d_home" % job_id)
        for path in (self.private_data_dir, self.worker_dir, self.home):
            os.makedirs(path)
        for sub in ("project", "inventory", "env"):
            os.mkdir(os.path.join(self.private_data_dir, sub))
        self.env = {}
        self.vault_password = None
        self.events = []
        self.statuses = []

    @property
    def artifact_dir(self):
        return os.path.join(self.private_data_dir, "artifacts", str(self.job_id))

    def add_project_file(self, name, content):
        path = os.path.join(self.private_data_dir, "project", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as project_file:
            project_file.write(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))

    def attach_credential(self, credential_type, inputs):
        """Inject a credential as AWX does; the file paths are the worker's (its directory is /runner)."""
        env, safe_env = credential_type.inject(inputs, self.private_data_dir, container_root=self.worker_dir)
        self.env.update(env)
        return env, safe_env

    def attach_vault_password(self, password):
        """Attach a Vault credential: as AWX does, the job asks for the vault password and runner answers the prompt."""
        self.vault_password = password

    def set_inventory(self, groups, hostvars, group_vars=None):
        path = os.path.join(self.private_data_dir, "inventory", "hosts")
        with open(path, "w") as script:
            script.write(inventory_script(groups, hostvars, group_vars))
        os.chmod(path, stat.S_IRUSR | stat.S_IXUSR | stat.S_IWUSR)

    def _write_env_file(self, name, data):
        path = os.path.join(self.private_data_dir, "env", name)
        with open(path, "w") as env_file:
            env_file.write(data if isinstance(data, str) else yaml.safe_dump(data))
        os.chmod(path, stat.S_IRUSR)

    def execution_environment(self):
        """The worker's own environment: the image's Python and collection, no talosctl, an empty HOME."""
        return {
            "PATH": os.pathsep.join([EE_BIN, "/usr/bin", "/bin"]),
            "HOME": self.home,
            "LANG": "C.UTF-8",
            "ANSIBLE_COLLECTIONS_PATH": os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.path.join(REPO, ".collections"),
        }

    def _run_pipeline(self, runner_kwargs):
        transmitted = os.path.join(os.path.dirname(self.private_data_dir), "transmit-%d" % self.job_id)
        results = os.path.join(os.path.dirname(self.private_data_dir), "results-%d" % self.job_id)
        with open(transmitted, "wb") as stream:
            ansible_runner.run(streamer="transmit", _output=stream, private_data_dir=self.private_data_dir, **runner_kwargs)
        # The worker exits with the playbook's code; the job's status comes through the stream.
        with open(transmitted, "rb") as stream, open(results, "wb") as output:
            subprocess.run([os.path.join(EE_BIN, "ansible-runner"), "worker", "--private-data-dir", self.worker_dir],
                           stdin=stream, stdout=output, env=self.execution_environment(), timeout=600, cwd=self.home,
                           check=False)
        with open(results, "rb") as stream:
            processed = ansible_runner.run(
                streamer="process", _input=stream, private_data_dir=self.private_data_dir, quiet=True,
                event_handler=self._event, status_handler=self._status, **runner_kwargs)
        return processed

    def _event(self, event):
        self.events.append(event)
        return True

    def _status(self, status, runner_config=None):
        self.statuses.append(status["status"])

    def run_playbook(self, playbook, extra_vars=None, check=False, diff=False, forks=5, use_fact_cache=True,
                     job_template_name="Talos job"):
        """Run ``project/<playbook>`` as a job of a job template; returns the processed runner result."""
        extravars = {
            "awx_job_id": self.job_id, "tower_job_id": self.job_id, "awx_job_launch_type": "manual",
            "awx_job_template_name": job_template_name, "tower_job_template_name": job_template_name,
            "awx_user_name": "admin", "awx_inventory_name": "Talos nodes",
        }
        extravars.update(extra_vars or {})
        self._write_env_file("extravars", extravars)
        args = (["--check"] if check else []) + ["-u", "root"] + (["--diff"] if diff else []) + ["--forks=%d" % forks]
        if self.vault_password is not None:
            args.append("--ask-vault-pass")
            self._write_env_file("passwords", {r"Vault password:\s*?$": self.vault_password})
        self._write_env_file("cmdline", " ".join(args))
        envvars = dict(self.env, JOB_ID=str(self.job_id), INVENTORY_ID="1", ANSIBLE_RETRY_FILES_ENABLED="False",
                       AWX_HOST="https://awx.example.com", ANSIBLE_SSH_CONTROL_PATH_DIR="/runner/cp")
        self._write_env_file("envvars", envvars)
        return self._run_pipeline(dict(
            ident=self.job_id, playbook=playbook,
            fact_cache_type="jsonfile" if use_fact_cache else "",
            settings={"job_timeout": 600, "suppress_ansible_output": True},
        ))

    def run_inventory_update(self, source_path):
        """An inventory update of a source "sourced from a project" (``project/<source_path>``).

        AWX writes the command to the private data dir's ``args`` file (runner runs it when
        no playbook is given): ``ansible-inventory --list --export`` on the source, its JSON
        written to ``artifacts/<id>/output.json``, which AWX then imports.
        """
        source = os.path.join(self.worker_dir, "project", source_path)
        args = ["ansible-inventory", "--list", "--export", "-i", source,
                "--output", os.path.join(self.worker_dir, "artifacts", str(self.job_id), "output.json"),
                "--playbook-dir", os.path.dirname(source)]
        with open(os.path.join(self.private_data_dir, "args"), "w") as args_file:
            args_file.write(" ".join(args))
        envvars = dict(self.env, INVENTORY_SOURCE_ID="1", INVENTORY_UPDATE_ID=str(self.job_id),
                       ANSIBLE_INVENTORY_UNPARSED_FAILED="True", ANSIBLE_INVENTORY_EXPORT="True",
                       ANSIBLE_VERBOSE_TO_STDERR="True", ANSIBLE_HOST_PATTERN_MISMATCH="error")
        self._write_env_file("envvars", envvars)
        return self._run_pipeline(dict(ident=self.job_id, settings={"job_timeout": 600, "suppress_ansible_output": True}))

    def inventory_output(self):
        """The inventory JSON text an inventory update produced (what AWX imports and stores)."""
        with open(os.path.join(self.artifact_dir, "output.json")) as output:
            return output.read()

    # What the job left behind.

    def artifact_texts(self):
        """Every file under the job's artifacts (stdout, job_events, fact_cache...) as ``{relative path: text}``."""
        texts = {}
        for directory, _dirs, names in os.walk(self.artifact_dir):
            for name in names:
                path = os.path.join(directory, name)
                with open(path, "rb") as artifact:
                    texts[os.path.relpath(path, self.artifact_dir)] = artifact.read().decode("utf-8", "replace")
        return texts

    @property
    def rc(self):
        """The exit code the worker reported (artifacts/<id>/rc)."""
        with open(os.path.join(self.artifact_dir, "rc")) as rc_file:
            return int(rc_file.read())

    def fact_cache(self):
        """The facts fact storage kept, by host (ansible-core 2.19 names the files ``s1_<host>``
        and wraps the facts in a ``__payload__`` string)."""
        cache_dir = os.path.join(self.artifact_dir, "fact_cache")
        facts = {}
        for name in sorted(os.listdir(cache_dir)) if os.path.isdir(cache_dir) else []:
            with open(os.path.join(cache_dir, name)) as cached:
                data = json.load(cached)
            host = re.sub(r"^s\d+_", "", name)
            facts[host] = json.loads(data["__payload__"]) if "__payload__" in data else data
        return facts

    def host_results(self, event_name):
        return [event for event in self.events if event.get("event") == event_name]


def secret_values(cluster):
    """Every secret the job may hold: the talosconfig's client key, the cluster's keys and tokens."""
    secrets = []

    def collect(node):
        for key, value in node.items():
            if isinstance(value, dict):
                collect(value)
            elif key in SECRET_KEYS and isinstance(value, str) and value:
                secrets.append(value)

    with open(os.path.join(cluster.state_dir, "secrets.yaml")) as bundle:
        collect(yaml.safe_load(bundle))
    with open(cluster.talosconfig_path()) as talosconfig:
        document = yaml.safe_load(talosconfig)
    secrets.append(document["contexts"][document["context"]]["key"])
    # The PEM form too: every base64 line of the decoded keys.
    for value in list(secrets):
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except ValueError:
            continue
        secrets.extend(line for line in decoded.splitlines() if len(line) >= 16 and "-----" not in line)
    return secrets
