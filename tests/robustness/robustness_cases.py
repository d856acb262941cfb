# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The robustness cases: bad inputs and faults for every module, one row each.

A row is ``case(id, module, args, expect, ...)``:

- ``args`` are the module's options; ``{name}`` in any string is replaced by
  the context (see ``test_robustness.context``): ``{cp}`` and ``{worker}``
  (node addresses), ``{cp_member_id}`` (the control plane's etcd member ID),
  ``{other_worker}``, ``{tmp}``, ``{admin}``, ``{reader}``,
  ``{wrong_ca}``, ``{mismatched_key}``, ``{binary}``, ``{bad_port}``,
  ``{cp_config}`` (a file with the control plane's own config, full of secrets),
  ``{etcd_snapshot}`` (a snapshot of real etcd, another cluster's),
  ``{corrupt_backups}`` (a backup directory whose only backup of ``prod`` is corrupt),
  ``{registry_password}`` (a secret that only the patches carry).
  The play sets talosconfig ``{admin}``, node ``{cp}`` and timeout 10 for every
  module (``module_defaults``); a row overrides them in ``args``.
- ``expect`` is a regular expression the task's ``msg`` must match (searched).
- ``group`` says what the run may do on the nodes: ``rejected`` rows must not
  send anything that reaches the audit log (not even a dry run); ``node`` rows
  may ask the node but change nothing; ``old`` rows run against a Talos v1.12
  cluster, with the rules of ``node``.
- ``outcome`` is ``failed`` (the default), ``ok`` or ``changed``; ``check_mode``
  and ``diff`` set the task keywords; ``result`` is an optional function that
  asserts more on the task result.

To cover a new module, add its rows here; the test picks them up.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import collections

Case = collections.namedtuple("Case", "id module args expect group outcome check_mode diff result")


def case(id, module, args, expect, group="rejected", outcome="failed", check_mode=False, diff=False, result=None):
    return Case(id, module, args, expect, group, outcome, check_mode, diff, result)


def _redacted_diff(result):
    diff = result["diff"]
    assert "<redacted" in diff["after"], diff


def _redacted_resource(result):
    items = result["ansible_facts"]["talos"]["resources"][0]["items"]
    assert items and "<redacted>" in repr(items[0]["spec"]), items


def _refusal_planned(result):
    assert result["plan"][0].startswith("refuse, since etcd still has quorum ("), result["plan"]
    assert result["plan"][-1].startswith("upload the snapshot (revision "), result["plan"]
    assert result["changed"] is False and result["wiped"] == [], result


def _etcd_info_of_the_control_plane(result):
    assert [member["hostname"] for member in result["members"]] == ["controlplane-1"], result["members"]
    (status,) = result["status"]
    assert status["member_id"] == result["members"][0]["id"] and status["db_size"] > 0, status
    assert result["alarms"] == [], result


def _certificate_info_of_the_control_plane(result):
    node = result  # one node (node, from module_defaults): its certificates at the top
    assert "nodes" not in result
    assert node["talos_ca"]["fingerprint_sha256"] == result["files"]["secrets"]["talos_ca"]["fingerprint_sha256"], result
    assert node["apid"]["trusted"] is True and result["files"]["talosconfig"]["client"]["roles"] == ["os:admin"], result


def _rotation_not_due(result):
    assert result["rotation"] is None and result["plan"] == [] and "diff" not in result, result
    assert result["node_phases"] == {
        result["invocation"]["module_args"]["node"]: {"machine_type": "controlplane", "phase": "original"}}


def _defragment_planned(result):
    (member,) = result["members"]
    assert member["selected"] and member["leader"] and not member["defragmented"], member
    assert result["defragmented"] == [] and result["alarms_disarmed"] == [], result


def _sensitive_type_fully_redacted(result):
    (resource,) = result["resources"]

    def leaves(value):
        if isinstance(value, dict):
            return [leaf for item in value.values() for leaf in leaves(item)]
        if isinstance(value, list):
            return [leaf for item in value for leaf in leaves(item)]
        return [value]
    assert set(leaves(resource["spec"])) <= {"<redacted>", None}, resource["spec"]
    assert resource["spec"]["machine"]["type"] == "<redacted>", resource["spec"]


REGISTRY_PATCH = {"machine": {"registries": {"config": {"registry.example.com": {"auth": {
    "username": "robot", "password": "{registry_password}", "auth": "cm9ib3Q6{registry_password}"}}}}}}

MODULE_CASES = [
    # talos_apply_config: patches that do not fit, values out of range, unreadable configs.
    case("apply-json-patch-missing-path", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [REGISTRY_PATCH, [{"op": "remove", "path": "/machine/nothing/here"}]]},
         r"^config_patches\[1\] operation 1 \(remove /machine/nothing/here\) cannot be applied to the v1alpha1 document: "
         r"the path .*does not exist"),
    case("apply-json-patch-unknown-op", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [[
             {"op": "replace", "path": "/machine/token", "value": "x"}, {"op": "v1alpha1", "path": "/machine"}]]},
         r"^config_patches\[0\] operation 2 has no valid op: a JSON patch operation is one of add, remove"),
    case("apply-json-patch-bad-index", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [[{"op": "add", "path": "/machine/certSANs/9", "value": "a"}]]},
         r"^config_patches\[0\] operation 1 \(add /machine/certSANs/9\) .*list index is out of range"),
    case("apply-json-patch-test-on-a-secret", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [[{"op": "test", "path": "/cluster/secret", "value": "guess"}]]},
         r"^config_patches\[0\] operation 1 \(test /cluster/secret\) .*is not the one the test expects"),
    case("apply-patch-yaml-text-unreadable", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": ["machine:\n  token: {registry_password}\n  ca: [unclosed\n"]},
         r"^config_patches\[0\] is not valid YAML: .* at line \d+, column \d+\.$"),
    case("apply-negative-try-timeout", "talos_apply_config",
         {"config_file": "{cp_config}", "mode": "try", "try_timeout": -5}, r"^try_timeout must be at least 1, got -5\.$"),
    case("apply-zero-wait-timeout", "talos_apply_config",
         {"config_file": "{cp_config}", "wait_timeout": 0}, r"^wait_timeout must be at least 1, got 0\.$"),
    case("apply-empty-config", "talos_apply_config", {"config": ""}, r"^config is empty: set it to a value or leave it out"),
    case("apply-config-not-yaml", "talos_apply_config", {"config": "machine: [unclosed\n  token: abc"},
         r"^config is not valid YAML: "),
    case("apply-config-file-directory", "talos_apply_config", {"config_file": "{tmp}"},
         r"^config_file .* cannot be read: Is a directory\.$"),
    case("apply-config-file-binary", "talos_apply_config", {"config_file": "{binary}"}, r"^config_file .* is not UTF-8 text\.$"),
    case("apply-unknown-mode", "talos_apply_config", {"config_file": "{cp_config}", "mode": "later"},
         r"value of mode must be one of: auto, no_reboot, reboot, staged, try"),
    case("apply-check-diff-redacts-registry-auth", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [REGISTRY_PATCH]},
         r"", group="node", outcome="changed", check_mode=True, diff=True, result=_redacted_diff),
    case("apply-insecure-against-a-configured-node", "talos_apply_config",
         {"config_file": "{cp_config}", "insecure": True, "endpoints": ["{cp_endpoint}"]},
         r"requires a client certificate, so the node is configured .*talosconfig \(mutual TLS\) instead of insecure: true",
         group="node"),
    case("apply-wrong-ca", "talos_apply_config", {"config_file": "{cp_config}", "talosconfig": "{wrong_ca}"},
         r"^Certificate verification of endpoint .* failed", group="node"),
    case("apply-reader-role", "talos_apply_config", {"config_file": "{cp_config}", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/ApplyConfiguration .*needs role os:admin", group="node"),

    # talos_facts: connection inputs from files and options, routing, TLS.
    case("facts-binary-talosconfig", "talos_facts", {"talosconfig": "{binary}"},
         r"^The talosconfig file .* is not a text file: expected the YAML that talosctl writes\.$"),
    case("facts-talosconfig-is-a-directory", "talos_facts", {"talosconfig": "{tmp}"},
         r"^The talosconfig path .* is a directory: expected a talosconfig file\.$"),
    case("facts-talosconfig-port-out-of-range", "talos_facts", {"talosconfig": "{bad_port}"},
         r"^Endpoint '.*:70000' from talosconfig context .* has port '70000': expected a number from 1 to 65535\.$"),
    case("facts-endpoints-option-port-zero", "talos_facts", {"endpoints": ["127.0.0.1:0"]},
         r"^Endpoint '127.0.0.1:0' from the endpoints option has port '0': expected a number from 1 to 65535\.$"),
    case("facts-mismatched-client-key", "talos_facts", {"talosconfig": "{mismatched_key}"},
         r"^The client certificate and key from talosconfig context .* cannot be loaded", group="node"),
    case("facts-worker-as-endpoint", "talos_facts", {"endpoints": ["{worker_endpoint}"], "node": "{other_worker}"},
         r"refused to forward .* endpoints must be control-plane nodes", group="node"),
    case("facts-unreachable-endpoint", "talos_facts", {"endpoints": ["127.0.0.1:1"]}, r"Talos endpoint 127.0.0.1:1 \(connection refused\) is unreachable",
         group="node"),
    case("facts-wrong-ca", "talos_facts", {"talosconfig": "{wrong_ca}"}, r"^Certificate verification of endpoint", group="node"),
    case("facts-unknown-subset", "talos_facts", {"gather_subset": ["hardware"]}, r"^gather_subset entry 'hardware' is not one of"),
    case("facts-zero-timeout", "talos_facts", {"timeout": 0}, r"^timeout must be at least 1, got 0\.$"),
    case("facts-empty-node", "talos_facts", {"node": ""}, r"^node is empty: set it to a value or leave it out"),
    case("facts-empty-endpoint-item", "talos_facts", {"endpoints": ["{cp_endpoint}", " "]},
         r"^endpoints\[1\] is empty: every item must be a non-empty string\.$"),
    case("facts-machine-config-resource-is-redacted", "talos_facts",
         {"gather_subset": ["min"], "resources": [{"type": "MachineConfigs.config.talos.dev", "namespace": "config", "id": "v1alpha1"}]},
         r"", group="node", outcome="ok", result=_redacted_resource),

    # talos_bootstrap
    case("bootstrap-worker-of-a-bootstrapped-cluster", "talos_bootstrap", {"node": "{worker}"},
         r"^Cannot bootstrap node .*: it is a worker node, and only a control-plane node can bootstrap etcd", group="node"),
    case("bootstrap-worker-check-mode", "talos_bootstrap", {"node": "{worker}"},
         r"^Cannot bootstrap node .*: it is a worker node", group="node", check_mode=True),
    case("bootstrap-recover-from-missing-file", "talos_bootstrap", {"snapshot": "{tmp}/missing.snapshot"},
         r"^The etcd snapshot to recover from, .*, is not a readable file\.$"),
    case("bootstrap-node-and-nodes", "talos_bootstrap", {"nodes": ["{cp}", "{worker}"]},
         r"^parameters are mutually exclusive: node\|nodes"),
    case("bootstrap-insecure-against-a-configured-node", "talos_bootstrap",
         {"insecure": True, "endpoints": ["{cp_endpoint}"]},
         r"requires a client certificate, so the node is configured", group="node"),

    # talos_upgrade
    case("upgrade-empty-image", "talos_upgrade", {"installer_image": ""}, r"^installer_image is empty: set it to a value or leave it out"),
    case("upgrade-version-latest", "talos_upgrade", {"version": "latest"},
         r"^version 'latest' is not a Talos release: give a release such as v1\.14\.1\.$"),
    case("upgrade-version-beyond-the-supported-releases", "talos_upgrade", {"version": "v1.99.0"},
         r"^version 'v1\.99\.0' is not a Talos release this collection supports \(v1\.9 to v1\.14, any patch release of "
         r"them\): v1\.99 is newer than v1\.14; check the value for a typo"),
    case("upgrade-image-without-tag", "talos_upgrade", {"installer_image": "ghcr.io/siderolabs/installer"}, r"has no tag"),
    case("upgrade-lifecycle-with-stage", "talos_upgrade", {"version": "v1.14.1", "api": "lifecycle", "stage": True},
         r"^stage apply only to the legacy upgrade API"),
    case("upgrade-negative-wait-timeout", "talos_upgrade", {"version": "v1.14.1", "wait_timeout": -1},
         r"^wait_timeout must be at least 1, got -1\.$"),
    # A reader fails at the first call that needs os:admin (reading the installer the node's config names).
    case("upgrade-reader-role", "talos_upgrade", {"version": "v1.14.1", "node": "{worker}", "talosconfig": "{reader}"},
         r"Permission denied .*os:admin", group="node"),

    # talos_service
    case("service-empty-name", "talos_service", {"name": "", "state": "restarted"}, r"^name is empty"),
    case("service-reader-role", "talos_service", {"name": "kubelet", "state": "restarted", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/ServiceRestart .*needs role os:admin or os:operator", group="node"),
    case("service-zero-wait-timeout", "talos_service", {"name": "kubelet", "state": "restarted", "wait_timeout": 0},
         r"^wait_timeout must be at least 1, got 0\.$"),

    # talos_etcd_member
    case("etcd-member-empty-member", "talos_etcd_member", {"member": "", "state": "absent"}, r"^member is empty"),
    case("etcd-member-wrong-ca", "talos_etcd_member", {"state": "present", "talosconfig": "{wrong_ca}"},
         r"^Certificate verification of endpoint", group="node"),
    case("etcd-member-id-that-is-no-id", "talos_etcd_member", {"member_id": "cp-3", "state": "absent"},
         r"^member_id 'cp-3' is not an etcd member ID"),
    case("etcd-member-id-and-member", "talos_etcd_member", {"member_id": "1", "member": "cp-1", "state": "absent"},
         r"mutually exclusive"),
    case("etcd-member-id-of-the-last-member", "talos_etcd_member", {"member_id": "{cp_member_id}", "state": "absent"},
         r"is the last voting etcd member", group="node", check_mode=True),
    case("etcd-member-remove-by-address-of-the-last-member", "talos_etcd_member",
         {"member": "{cp}", "state": "absent", "method": "remove"}, r"is the last voting etcd member", group="node"),

    # talos_etcd_snapshot and talos_etcd_restore
    case("etcd-snapshot-empty-dest", "talos_etcd_snapshot", {"dest": " "}, r"^dest is empty"),
    case("etcd-snapshot-dest-and-directory", "talos_etcd_snapshot", {"dest": "{tmp}/etcd.snapshot", "directory": "{tmp}"},
         r"parameters are mutually exclusive: dest\|directory"),
    case("etcd-snapshot-prefix-that-escapes", "talos_etcd_snapshot", {"directory": "{tmp}", "prefix": "../elsewhere"},
         r"^prefix must start with a letter or digit .* not '\.\./elsewhere'\.$"),
    case("etcd-snapshot-keep-none", "talos_etcd_snapshot", {"directory": "{tmp}", "keep": 0}, r"keep"),
    case("etcd-snapshot-unwritable", "talos_etcd_snapshot", {"dest": "/sys/etcd.snapshot"},
         r"^Cannot write the etcd snapshot to /sys/etcd.snapshot: Permission denied\.$", group="node"),
    case("etcd-snapshot-missing-directory", "talos_etcd_snapshot", {"directory": "{tmp}/missing"},
         r"^Cannot write etcd backups to .*/missing: it does not exist; create it or set directory to an existing "
         r"directory\.$"),
    case("etcd-snapshot-of-the-etcd-model", "talos_etcd_snapshot", {"directory": "{tmp}"},
         r"failed reading etcd snapshot: the emulator's etcd model cannot make a snapshot; start real etcd members to take "
         r"one: make demo with Go installed, or tests/talos-emulator up --etcd real\.$", group="node", check_mode=True),
    case("etcd-restore-verifies-a-backup-of-a-healthy-cluster", "talos_etcd_restore",
         {"snapshot": "{etcd_snapshot}"},
         r"", group="node", outcome="ok", check_mode=True, result=_refusal_planned),
    case("etcd-restore-missing-snapshot", "talos_etcd_restore", {"snapshot": "{tmp}/missing.snapshot"},
         r"^The etcd snapshot .*missing.snapshot cannot be read: No such file or directory\.$"),
    case("etcd-restore-config-as-snapshot", "talos_etcd_restore", {"snapshot": "{cp_config}"},
         r"has no sha256 appended by etcd, so it is truncated or a copy of a data directory's database"),
    case("etcd-restore-config-as-database-copy", "talos_etcd_restore",
         {"snapshot": "{cp_config}", "skip_hash_check": True},
         r"is not an etcd database etcd can restore"),
    case("etcd-restore-snapshot-and-directory", "talos_etcd_restore",
         {"snapshot": "{tmp}/etcd.snapshot", "directory": "{tmp}"},
         r"parameters are mutually exclusive: snapshot\|directory"),
    case("etcd-restore-empty-backup-directory", "talos_etcd_restore", {"directory": "{tmp}", "prefix": "prod"},
         r"^No etcd backup named prod-<time>-r<revision>.snapshot in .* checks out\.$"),
    case("etcd-restore-only-backup-corrupt", "talos_etcd_restore", {"directory": "{corrupt_backups}", "prefix": "prod"},
         r"^No etcd backup named prod-<time>-r<revision>.snapshot in .*/corrupt-backups checks out: "
         r"prod-20260101T000000Z-r4.snapshot is corrupt \(the sha256 etcd appended does not match its content\)\.$"),

    # talos_etcd_info and talos_etcd_maintenance
    case("etcd-info-reads-members-status-alarms", "talos_etcd_info", {}, r"", group="node", outcome="ok",
         result=_etcd_info_of_the_control_plane),
    case("etcd-info-from-a-worker", "talos_etcd_info", {"node": "{worker}"},
         r"etcd status is only available on control plane nodes", group="node"),
    case("etcd-maintenance-ratio-above-one", "talos_etcd_maintenance", {"defragment": True, "defragment_min_free_ratio": 1.5},
         r"^defragment_min_free_ratio must be between 0\.0 and 1\.0, got 1\.5\.$"),
    case("etcd-maintenance-plan-in-check-mode", "talos_etcd_maintenance", {"defragment": True, "disarm_alarms": True},
         r"", group="node", outcome="changed", check_mode=True, result=_defragment_planned),
    case("etcd-maintenance-reader-role", "talos_etcd_maintenance", {"defragment": True, "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/EtcdDefragment .*needs role os:admin or os:operator", group="node"),

    # talos_certificate_info: certificates only, whatever file it is pointed at.
    case("certificate-info-bad-warn-before", "talos_certificate_info", {"warn_before": "30 days"},
         r"^warn_before must be a duration such as 720h, 1h30m or 30d, got '30 days'\.$"),
    case("certificate-info-reports-bundle-and-node", "talos_certificate_info", {"secrets": "{secrets_bundle}"}, r"",
         group="node", outcome="ok", result=_certificate_info_of_the_control_plane),
    case("certificate-info-secrets-is-a-machine-config", "talos_certificate_info", {"secrets": "{cp_config}"},
         r"^The secrets bundle .* is damaged or incomplete: "),
    case("certificate-info-kubeconfig-is-a-machine-config", "talos_certificate_info", {"kubeconfig": "{cp_config}"},
         r"", group="node", outcome="ok"),
    case("certificate-info-missing-kubeconfig", "talos_certificate_info", {"kubeconfig": "{tmp}/missing"},
         r"^kubeconfig .*/missing does not exist or is not a kubeconfig \(a YAML mapping\)\.$"),

    # talos_rotate_ca: refused before any change; check mode plans with fingerprints, never a key.
    case("rotate-ca-issued-after-in-the-future", "talos_rotate_ca", {"secrets": "{secrets_bundle}", "issued_after": "2999-01-01"},
         r"^issued_after 2999-01-01 is in the future: every run until then would rotate the CA again\.$"),
    case("rotate-ca-issued-after-not-a-time", "talos_rotate_ca", {"secrets": "{secrets_bundle}", "issued_after": "yesterday"},
         r"^issued_after must be an RFC 3339 time such as 2026-11-27T08:00:00Z, or a date such as 2026-11-27; got 'yesterday'\.$"),
    case("rotate-ca-secrets-is-a-machine-config", "talos_rotate_ca", {"secrets": "{cp_config}"},
         r"^The secrets bundle .* is damaged or incomplete: "),
    case("rotate-ca-etcd-is-not-rotated", "talos_rotate_ca", {"secrets": "{secrets_bundle}", "rotate": ["etcd"]},
         r"value of rotate must be one or more of: talos, kubernetes"),
    case("rotate-ca-given-ca-of-a-ca-not-rotated", "talos_rotate_ca",
         {"secrets": "{secrets_bundle}", "new_cas": [{"ca": "kubernetes", "crt": "not a certificate", "key": "not a key"}]},
         r"^new_cas has a kubernetes CA but rotate does not hold kubernetes: add kubernetes to rotate, or drop that "
         r"entry\.$"),
    case("rotate-ca-given-ca-not-a-certificate", "talos_rotate_ca",
         {"secrets": "{secrets_bundle}", "new_cas": [{"ca": "talos", "crt": "not a certificate", "key": "not a key"}]},
         r"^new_cas\[ca=talos\]\.crt is not a PEM certificate\.$"),
    case("rotate-ca-kubernetes-a-member-left-out", "talos_rotate_ca",
         {"secrets": "{secrets_bundle}", "rotate": ["kubernetes"], "renew_before": "876000h"},
         r"^Cluster members worker-1, worker-2 are not in nodes: ", group="node", check_mode=True),
    case("rotate-ca-kubernetes-without-a-control-plane", "talos_rotate_ca",
         {"secrets": "{secrets_bundle}", "rotate": ["kubernetes"], "node": "{worker}"},
         r"^nodes lists no control plane: the Kubernetes CA rotation reads the Kubernetes API with the admin kubeconfig ",
         group="node", check_mode=True),
    case("rotate-ca-a-member-left-out", "talos_rotate_ca", {"secrets": "{secrets_bundle}", "renew_before": "876000h"},
         r"^Cluster members worker-1, worker-2 are not in nodes: ", group="node", check_mode=True),
    case("rotate-ca-nothing-due", "talos_rotate_ca", {"secrets": "{secrets_bundle}"}, r"", group="node", outcome="ok",
         diff=True, result=_rotation_not_due),

    # talos_kubernetes_upgrade: versions and paths refused before any call; a worker issues no kubeconfig; the
    # robustness cluster runs no Kubernetes API server.
    case("kubernetes-upgrade-to-no-version", "talos_kubernetes_upgrade", {"to_version": "latest"},
         r"^to_version 'latest' is not a Kubernetes version such as 1\.37\.2\.$"),
    case("kubernetes-upgrade-skips-a-minor", "talos_kubernetes_upgrade", {"to_version": "1.37.2", "from_version": "v1.35.4"},
         r"^Kubernetes upgrades one minor release at a time: 1\.35\.4 to 1\.37\.2 skips 1\.36; upgrade to the newest "
         r"1\.36 patch release first\.$"),
    case("kubernetes-upgrade-through-a-worker", "talos_kubernetes_upgrade", {"to_version": "1.37.2", "node": "{worker}"},
         r"kubeconfig is only available on control plane nodes", group="node"),
    case("kubernetes-upgrade-without-an-api-server", "talos_kubernetes_upgrade", {"to_version": "1.37.2"},
         r"^The Kubernetes API at https://\S+ could not be reached to list the nodes \(.*\); the admin kubeconfig Talos "
         r"issues names it as the cluster's control-plane endpoint\.$", group="node"),
    case("kubernetes-upgrade-check-mode-without-an-api-server", "talos_kubernetes_upgrade", {"to_version": "1.37.2"},
         r"could not be reached to list the nodes", group="node", check_mode=True, diff=True),
    case("kubernetes-upgrade-image-with-a-tag", "talos_kubernetes_upgrade",
         {"to_version": "1.37.2", "apiserver_image": "registry.example.com/kube-apiserver:v1.37.2"},
         r"^apiserver_image 'registry\.example\.com/kube-apiserver:v1\.37\.2' is not an image repository such as "
         r"registry\.example\.com/kube-apiserver"),
    case("kubernetes-upgrade-endpoint-without-a-scheme", "talos_kubernetes_upgrade",
         {"to_version": "1.37.2", "kubernetes_endpoint": "10.5.0.2:6443"},
         r"^kubernetes_endpoint '10\.5\.0\.2:6443' is not the URL of a Kubernetes API server such as https://10\.5\.0\.2:6443\.$"),

    # talos_kubeconfig
    case("kubeconfig-dest-is-a-directory", "talos_kubeconfig", {"dest": "{tmp}"},
         r"^Cannot write the kubeconfig to .*: it is a directory; set dest to a file path\.$"),
    case("kubeconfig-dest-in-a-missing-directory", "talos_kubeconfig", {"dest": "{tmp}/missing/kubeconfig"},
         r"^Cannot write the kubeconfig to .*: directory .* does not exist\.$"),
    case("kubeconfig-empty-server", "talos_kubeconfig", {"dest": "{tmp}/kubeconfig", "server": ""}, r"^server is empty"),
    case("kubeconfig-reader-role", "talos_kubeconfig", {"dest": "{tmp}/kubeconfig", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/Kubeconfig .*needs role os:admin", group="node"),
    case("kubeconfig-from-a-worker", "talos_kubeconfig", {"dest": "{tmp}/kubeconfig", "node": "{worker}"},
         r"(?i)control.plane", group="node"),

    # Power and lifecycle modules: a weak role and bad values are refused before anything changes.
    case("reboot-reader-role", "talos_reboot", {"node": "{worker}", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/Reboot .*needs role os:admin or os:operator", group="node"),
    case("reboot-unknown-mode", "talos_reboot", {"node": "{worker}", "mode": "hard"}, r"value of mode must be one of"),
    case("reboot-empty-service-to-wait-for", "talos_reboot", {"node": "{worker}", "wait_for_services": ["kubelet", ""]},
         r"^wait_for_services\[1\] is empty"),
    case("reboot-service-no-node-runs", "talos_reboot", {"node": "{worker}", "wait_for_services": ["etcd", "kublet"]},
         r"^wait_for_services names kublet, which no Talos node runs: Talos's services are apid, "),
    case("shutdown-reader-role", "talos_shutdown", {"node": "{worker}", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/Shutdown", group="node"),
    case("reset-reader-role", "talos_reset", {"node": "{worker}", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/Reset .*needs role os:admin", group="node"),
    case("reset-empty-disk-to-wipe", "talos_reset", {"node": "{worker}", "wipe_mode": "user_disks", "user_disks_to_wipe": [""]},
         r"^user_disks_to_wipe\[0\] is empty"),
    case("rollback-reader-role", "talos_rollback", {"node": "{worker}", "talosconfig": "{reader}"},
         r"Permission denied for machine.MachineService/Rollback", group="node"),
    case("rollback-zero-wait-timeout", "talos_rollback", {"node": "{worker}", "wait_timeout": 0},
         r"^wait_timeout must be at least 1, got 0\.$"),

    # Read-only modules: bad values refused, and resources full of secrets come back redacted.
    case("health-zero-poll-interval", "talos_health", {"poll_interval": 0}, r"^poll_interval must be at least 1, got 0\.$"),
    case("health-server-side-ignoring-nodes", "talos_health", {"checks": "all", "ignore_nodes": ["{worker}"]},
         r"^ignore_nodes works with checks: talos only"),
    case("apply-reboot-of-the-only-control-plane", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [{"machine": {"sysctls": {"vm.max_map_count": "262144"}}}],
          "mode": "reboot"},
         r"^Refusing to reboot control-plane node .*; fix the unhealthy members first, or set force_quorum_loss: true "
         r"to go ahead anyway\.$", group="node"),
    case("logs-negative-lines", "talos_logs", {"service": "kubelet", "lines": -1}, r"^lines must be at least 0, got -1\.$"),
    case("logs-empty-service", "talos_logs", {"service": ""}, r"^service is empty"),
    case("file-info-relative-path", "talos_file_info", {"path": "etc"}, r"^path must be an absolute path on the node"),
    case("file-info-negative-depth", "talos_file_info", {"path": "/var", "depth": -1}, r"^depth must be at least 0, got -1\.$"),
    case("fetch-relative-src", "talos_fetch", {"src": "var/log", "dest": "{tmp}/fetched"},
         r"^src must be an absolute path on the node"),
    case("fetch-as-reader-names-the-path-and-role", "talos_fetch", {"src": "/etc", "dest": "{tmp}/fetched", "talosconfig": "{reader}"},
         r"^Cannot copy /etc on node .*: Permission denied .*os:admin", group="node"),
    case("support-bundle-zero-concurrency", "talos_support_bundle", {"dest": "{tmp}/support.zip", "max_concurrency": 0},
         r"^max_concurrency must be at least 1, got 0\.$"),
    case("support-bundle-dest-is-a-directory", "talos_support_bundle", {"dest": "{tmp}"},
         r"^Cannot write the support bundle to .*: it is a directory; set dest to a file path\.$"),
    case("support-bundle-bad-recipient", "talos_support_bundle", {"dest": "{tmp}/support.zip", "encryption_recipients": ["nope"]},
         r"^encryption_recipients holds 'nope', which is not a recipient age accepts"),
    case("support-bundle-of-the-cluster", "talos_support_bundle",
         {"dest": "{tmp}/support.zip", "nodes": ["{cp}", "{worker}"], "node": "{{{{ omit }}}}"}, r"", group="node",
         outcome="changed"),
    case("resource-info-empty-type", "talos_resource_info", {"type": " "}, r"^type is empty"),
    case("resource-info-machine-config-is-redacted", "talos_resource_info",
         {"type": "MachineConfigs.config.talos.dev", "namespace": "config", "id": "v1alpha1"}, r"", group="node", outcome="ok",
         result=_sensitive_type_fully_redacted),
    case("reset-label-the-node-has-no-volume-for", "talos_reset", {"node": "{worker}", "system_labels_to_wipe": ["EFI"]},
         r"^system_labels_to_wipe names EFI, which node .* does not have; its volumes are EPHEMERAL, META, STATE",
         group="node", check_mode=True),

    # Config migration: a typo in accept_dropped drops nothing; a node's plan and diff show no secret.
    case("config-migrate-accept-dropped-names-no-field", "talos_config_migrate",
         {"config_file": "{cp_config}", "accept_dropped": ["machine.kubelet.extraMounts"]},
         r"^accept_dropped names \.machine\.kubelet\.extraMounts, which the config does not set or which has a v1\.14 home"),
    case("config-migrate-check-diff-redacts-the-node-keys", "talos_config_migrate", {},
         r"", group="node", outcome="changed", check_mode=True, diff=True, result=_redacted_diff),

    # Config generation on the controller: unreadable inputs, and a patch failure over the cluster's own secrets.
    case("machine-config-json-patch-over-the-cluster-secrets", "talos_machine_config",
         {"secrets": "{secrets_bundle}", "machine_type": "controlplane", "cluster_name": "demo", "talos_version": "v1.11",
          "cluster_endpoint": "https://{cp}:6443", "config_patches": [REGISTRY_PATCH, [{"op": "remove", "path": "/cluster/nothing"}]]},
         r"operation 1 \(remove /cluster/nothing\) cannot be applied"),
    case("machine-config-json-patch-on-a-multi-document-config", "talos_machine_config",
         {"secrets": "{secrets_bundle}", "machine_type": "controlplane", "cluster_name": "demo",
          "cluster_endpoint": "https://{cp}:6443", "config_patches": [REGISTRY_PATCH, [{"op": "remove", "path": "/cluster/nothing"}]]},
         r"^config_patches\[1\] is a JSON patch \(RFC 6902\), which cannot be applied to a multi-document machine config "
         r"\(v1alpha1, .*\): use a strategic merge patch instead"),
    case("machine-config-patch-newer-than-talos-version", "talos_machine_config",
         {"secrets": "{secrets_bundle}", "machine_type": "controlplane", "cluster_name": "demo", "talos_version": "v1.13",
          "cluster_endpoint": "https://{cp}:6443", "dest": "{tmp}/controlplane.yaml",
          "config_patches": [REGISTRY_PATCH, {"apiVersion": "v1alpha1", "kind": "KubeletConfig"}]},
         r"^The config's KubeletConfig document needs Talos v1\.14\.0 or newer; talos_version v1\.13 \(v1\.13\.0\) is "
         r"the oldest Talos the config is for\.$"),
    case("machine-config-secrets-is-a-directory", "talos_machine_config",
         {"secrets": "{tmp}", "machine_type": "worker", "cluster_name": "demo", "cluster_endpoint": "https://{cp}:6443"},
         r"(?i)director"),
    case("client-config-secrets-binary", "talos_client_config",
         {"secrets": "{binary}", "dest": "{tmp}/talosconfig-new", "cluster_name": "demo", "endpoints": ["{cp}"]},
         r"(?i)secrets"),
    case("machine-secrets-from-binary-config", "talos_machine_secrets",
         {"path": "{tmp}/secrets-new.yaml", "from_controlplane_config": "{binary}"}, r"(?i)from_controlplane_config|config"),

    # Adoption reads every config, never writes to a node; the files it writes hold keys, its output none.
    case("config-backup-directory-is-a-file", "talos_config_backup", {"directory": "{binary}"},
         r"^directory .* is not a directory: set directory to a directory on the controller\.$"),
    case("config-backup-as-reader", "talos_config_backup", {"directory": "{tmp}/config-backup", "talosconfig": "{reader}"},
         r"Permission denied .*os:admin", group="node"),
    case("config-backup-of-the-control-plane", "talos_config_backup", {"directory": "{tmp}/config-backup"}, r"",
         group="node", outcome="changed", diff=True),
    case("adopt-one-group-for-both", "talos_adopt", {"dest": "{tmp}/adopted", "worker_group": "controlplane"},
         r"^controlplane_group and worker_group must differ, both are 'controlplane'\.$"),
    case("adopt-as-reader", "talos_adopt", {"dest": "{tmp}/adopted", "talosconfig": "{reader}"},
         r"Permission denied .*os:admin", group="node"),
    case("adopt-backup-of-other-nodes", "talos_adopt", {"dest": "{tmp}/adopted-other", "backup": {"nodes": {"10.9.9.9": {"sha256": "0"}}}},
         r"^backup holds no config of .*: back up every node of the task first\. Nothing was written\.$", group="node"),
    case("adopt-backup-not-a-result", "talos_adopt", {"dest": "{tmp}/adopted-other", "backup": {"changed": False}},
         r"^backup must be the result talos_config_backup registered for these nodes: it has neither nodes nor sha256\.$",
         group="node"),
    case("adopt-the-control-plane", "talos_adopt", {"dest": "{tmp}/adopted"}, r"", group="node", outcome="changed", diff=True),
    case("config-backup-check-diff", "talos_config_backup", {"directory": "{tmp}/config-backup-check"}, r"",
         group="node", outcome="changed", check_mode=True, diff=True),
    case("adopt-check-diff", "talos_adopt", {"dest": "{tmp}/adopted-check"}, r"", group="node", outcome="changed",
         check_mode=True, diff=True),

    # Images on nodes: bad references and installers refused before any call; a reader may list but not pull.
    case("image-bad-reference", "talos_image", {"name": "Not An Image"}, r"^name 'Not An Image' is not an image reference"),
    case("image-installer-without-tag", "talos_image", {"installer_image": "ghcr.io/siderolabs/installer"}, r"has no tag"),
    case("image-installer-version-latest", "talos_image", {"installer_version": "latest"},
         r"^installer_version 'latest' is not a Talos release: give a release such as v1\.14\.1\.$"),
    case("image-zero-concurrency", "talos_image", {"name": "busybox", "max_concurrency": 0},
         r"^max_concurrency must be at least 1, got 0\.$"),
    case("image-list-as-reader", "talos_image_info", {"talosconfig": "{reader}"}, r"", group="node", outcome="ok"),
    case("image-pull-as-reader", "talos_image", {"name": "busybox", "talosconfig": "{reader}"},
         r"Permission denied for machine.ImageService/Pull .*needs role os:admin or os:operator", group="node"),
    case("image-remove-absent-on-talos-v1.12", "talos_image", {"node": "{worker}", "name": "busybox:1.36", "state": "absent"},
         r"", group="old", outcome="ok"),

    # The Image Factory: an unreachable factory, a URL that is none, schematics the factory would refuse.
    case("factory-schematic-unreachable", "talos_image_factory_schematic", {"image_factory_url": "http://127.0.0.1:9", "timeout": 5},
         r"^The Image Factory at http://127.0.0.1:9 cannot be reached \(.*\): check image_factory_url"),
    case("factory-schematic-meta-key-out-of-range", "talos_image_factory_schematic", {"meta": [{"key": 300, "value": "x"}]},
         r"^meta\[0\]\.key must be between 0 and 255, got 300\.$"),
    case("factory-schematic-unknown-field", "talos_image_factory_schematic", {"schematic": {"customization": {"bogus": 1}}},
         r"^schematic customization has unknown field bogus"),
    case("factory-info-not-a-url", "talos_image_factory_info", {"image_factory_url": "factory.talos.dev"},
         r"^The Image Factory URL 'factory.talos.dev' is not an http\(s\) URL"),
    case("factory-info-version-latest", "talos_image_factory_info", {"talos_version": "latest", "image_factory_url": "http://127.0.0.1:9"},
         r"^talos_version 'latest' is not a Talos version such as v1.14.0\.$"),

    # Talos v1.12: a worker answers Bootstrap with FailedPrecondition there, and is still refused at once.
    case("bootstrap-worker-on-talos-v1.12", "talos_bootstrap", {"node": "{worker}"},
         r"^Cannot bootstrap node .*: it is a worker node", group="old"),
    case("apply-v1.14-document-to-talos-v1.12", "talos_apply_config",
         {"config_file": "{cp_config}", "config_patches": [REGISTRY_PATCH, {"apiVersion": "v1alpha1", "kind": "KubeletConfig"}]},
         r"^The config's KubeletConfig document needs Talos v1\.14\.0 or newer; node .* runs v1\.12\.0\.$", group="old",
         check_mode=True, diff=True),
    case("facts-insecure-against-a-configured-v1.12-node", "talos_facts",
         {"insecure": True, "endpoints": ["{cp_endpoint}"]},
         r"requires a client certificate, so the node is configured", group="old"),
]
