# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Machine config loading, patches, redaction and dry-run diffs."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import difflib
import textwrap

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.config import machine_config as mc
from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED, REDACTED_CHANGED

CONFIG = textwrap.dedent("""\
    version: v1alpha1
    persist: true
    machine:
      type: controlplane
      token: wxyz12.abcdefghijklmnop
      ca:
        crt: Y2VydGlmaWNhdGUtcHVibGlj
        key: b3MtY2Eta2V5LXByaXZhdGU=
      certSANs: [10.0.0.1]
      network:
        hostname: cp-1
      features:
        apidCheckExtKeyUsage: true
    cluster:
      id: Y2x1c3Rlci1pZA==
      secret: Y2x1c3Rlci1zZWNyZXQtdmFsdWU=
      token: abcdef.0123456789abcdef
      secretboxEncryptionSecret: c2VjcmV0Ym94LXNlY3JldA==
      aescbcEncryptionSecret: YWVzY2JjLXNlY3JldC12YWx1ZQ==
      ca:
        crt: azhzLWNhLWNydA==
        key: azhzLWNhLWtleS1wcml2YXRl
      aggregatorCA:
        crt: YWdnLWNydA==
        key: YWdncmVnYXRvci1rZXktcHJpdmF0ZQ==
      serviceAccount:
        key: c2VydmljZS1hY2NvdW50LWtleQ==
      etcd:
        ca:
          crt: ZXRjZC1jcnQ=
          key: ZXRjZC1jYS1rZXktcHJpdmF0ZQ==
    ---
    apiVersion: v1alpha1
    kind: RegistryAuthConfig
    name: registry.example.com
    password: registry-password-value
    """)

# The v1alpha1 document alone: the only kind of config a JSON patch applies to.
SINGLE_DOCUMENT = CONFIG.split("---\n")[0]

SECRETS = [
    "wxyz12.abcdefghijklmnop", "b3MtY2Eta2V5LXByaXZhdGU=", "Y2x1c3Rlci1zZWNyZXQtdmFsdWU=", "abcdef.0123456789abcdef",
    "c2VjcmV0Ym94LXNlY3JldA==", "YWVzY2JjLXNlY3JldC12YWx1ZQ==", "azhzLWNhLWtleS1wcml2YXRl",
    "YWdncmVnYXRvci1rZXktcHJpdmF0ZQ==", "c2VydmljZS1hY2NvdW50LWtleQ==", "ZXRjZC1jYS1rZXktcHJpdmF0ZQ==",
    "registry-password-value",
]


def _v1alpha1(config):
    return config.v1alpha1


class TestLoad:
    def test_text_is_sent_unchanged_without_patches(self):
        config = mc.load_config(config=CONFIG)
        assert config.data == CONFIG.encode()
        assert len(config.documents) == 2
        assert config.machine_type == "controlplane"

    def test_file(self, tmp_path):
        path = tmp_path / "controlplane.yaml"
        path.write_text(CONFIG)
        assert mc.load_config(config_file=str(path)).data == CONFIG.encode()

    def test_missing_file_names_the_parameter(self, tmp_path):
        with pytest.raises(TalosConfigError, match=r"^config_file .*missing.yaml cannot be read"):
            mc.load_config(config_file=str(tmp_path / "missing.yaml"))

    def test_unparseable_config_names_the_parameter_without_quoting_it(self):
        text = "machine:\n  token: [wxyz12.secretsecret\n  type: worker\n"
        with pytest.raises(TalosConfigError) as raised:
            mc.load_config(config=text)
        assert raised.value.message.startswith("config is not valid YAML: ")
        assert "line" in raised.value.message
        assert "secretsecret" not in raised.value.message

    def test_scalar_document_is_refused(self):
        with pytest.raises(TalosConfigError, match=r"^config document 2 is a scalar"):
            mc.load_config(config="version: v1alpha1\n---\njust text\n")

    def test_empty_config_is_refused(self):
        with pytest.raises(TalosConfigError, match="^config holds no machine config document"):
            mc.load_config(config="# nothing\n")

    def test_timestamps_stay_strings(self):
        config = mc.load_config(config="version: v1alpha1\nmachine:\n  date: 2024-01-01\n", config_patches=[{"x": 1}])
        assert _v1alpha1(config)["machine"]["date"] == "2024-01-01"


class TestPatches:
    def test_merge_patch_merges_replaces_and_deletes(self):
        config = mc.load_config(config=CONFIG, config_patches=[
            {"machine": {"network": {"hostname": "cp-2"}, "certSANs": ["10.0.0.2"], "features": None}},
        ])
        machine = _v1alpha1(config)["machine"]
        assert machine["network"] == {"hostname": "cp-2"}
        assert machine["certSANs"] == ["10.0.0.2"]  # RFC 7386: lists are replaced
        assert "features" not in machine
        assert machine["token"] == "wxyz12.abcdefghijklmnop"

    def test_patches_apply_in_order_and_data_is_the_patched_yaml(self):
        config = mc.load_config(config=CONFIG, config_patches=[
            "machine:\n  network:\n    hostname: first\n",
            {"machine": {"network": {"hostname": "second"}}},
        ])
        sent = list(yaml.safe_load_all(config.data))
        assert sent[0]["machine"]["network"]["hostname"] == "second"
        assert sent[1]["kind"] == "RegistryAuthConfig"

    def test_json_patch_as_list_and_as_yaml_text(self):
        config = mc.load_config(config=SINGLE_DOCUMENT, config_patches=[
            [{"op": "add", "path": "/machine/certSANs/-", "value": "10.0.0.9"}],
            "- op: replace\n  path: /machine/network/hostname\n  value: patched\n",
        ])
        machine = _v1alpha1(config)["machine"]
        assert machine["certSANs"] == ["10.0.0.1", "10.0.0.9"]
        assert machine["network"]["hostname"] == "patched"

    def test_json_patch_failure_names_the_patch(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[1\] operation 1 \(remove /machine/nothing/here\) cannot be "
                                                   r"applied to the v1alpha1 document: the path .* does not exist"):
            mc.load_config(config=SINGLE_DOCUMENT, config_patches=[
                {"machine": {"network": {"hostname": "ok"}}},
                [{"op": "remove", "path": "/machine/nothing/here"}],
            ])

    @pytest.mark.parametrize("patch", [
        [{"op": "replace", "path": "/machine/network/hostname", "value": "patched"}],
        "- op: replace\n  path: /machine/network/hostname\n  value: patched\n",
    ])
    def test_json_patch_on_a_multi_document_config_is_refused(self, patch):
        with pytest.raises(TalosConfigError) as raised:
            mc.load_config(config=CONFIG, config_patches=[{"machine": {"network": {"hostname": "merged"}}}, patch])
        assert raised.value.message == (
            "config_patches[1] is a JSON patch (RFC 6902), which cannot be applied to a multi-document machine config "
            "(v1alpha1, RegistryAuthConfig/registry.example.com): use a strategic merge patch instead, a mapping (with "
            "kind to patch a document other than v1alpha1).")

    def test_json_patch_is_refused_once_a_patch_adds_a_document(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[1\] is a JSON patch \(RFC 6902\), which cannot .*"
                                                   r"\(v1alpha1, HostnameConfig\)"):
            mc.load_config(config=SINGLE_DOCUMENT, config_patches=[
                {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "cp-1"},
                [{"op": "add", "path": "/machine/certSANs/-", "value": "10.0.0.9"}],
            ])

    def test_json_patch_applies_once_the_other_documents_are_deleted(self):
        config = mc.load_config(config=CONFIG, config_patches=[
            {"apiVersion": "v1alpha1", "kind": "RegistryAuthConfig", "name": "registry.example.com", "$patch": "delete"},
            [{"op": "add", "path": "/machine/certSANs/-", "value": "10.0.0.9"}],
        ])
        assert _v1alpha1(config)["machine"]["certSANs"] == ["10.0.0.1", "10.0.0.9"]

    def test_json_patch_without_the_jsonpatch_library_says_so(self, monkeypatch):
        monkeypatch.setattr(mc, "HAS_JSONPATCH", False)
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] is a JSON patch \(RFC 6902\), which needs the "
                                                   r"Python library jsonpatch"):
            mc.load_config(config=SINGLE_DOCUMENT, config_patches=[[{"op": "remove", "path": "/machine/certSANs"}]])

    def test_unparseable_patch_names_its_index(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[2\] is not valid YAML"):
            mc.load_config(config=CONFIG, config_patches=[{"a": 1}, {"b": 2}, "machine: [unclosed"])

    def test_scalar_patch_is_refused(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] must be a mapping"):
            mc.load_config(config=CONFIG, config_patches=["just a string"])

    def test_list_of_non_operations_is_refused(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] is a list, so it must be a JSON patch"):
            mc.load_config(config=CONFIG, config_patches=[["a", "b"]])

    def test_document_patches_by_kind(self):
        config = mc.load_config(config=CONFIG, config_patches=[
            {"apiVersion": "v1alpha1", "kind": "RegistryAuthConfig", "name": "registry.example.com", "username": "robot"},
            "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: from-document\n",
        ])
        kinds = [document.get("kind") for document in config.documents]
        assert kinds == [None, "RegistryAuthConfig", "HostnameConfig"]
        assert config.documents[1]["username"] == "robot"
        assert config.documents[1]["password"] == "registry-password-value"

    def test_document_delete(self):
        config = mc.load_config(config=CONFIG, config_patches=[
            {"apiVersion": "v1alpha1", "kind": "RegistryAuthConfig", "name": "registry.example.com", "$patch": "delete"},
        ])
        assert [document.get("kind") for document in config.documents] == [None]

    def test_merge_patch_without_v1alpha1_document(self):
        with pytest.raises(TalosConfigError, match=r"^config_patches\[0\] patches the v1alpha1 document, but the config has none"):
            mc.load_config(config="apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n", config_patches=[{"machine": {}}])

    def test_patches_do_not_touch_the_given_documents(self):
        documents = [{"version": "v1alpha1", "machine": {"type": "worker"}}]
        mc.apply_patches(documents, [{"machine": {"type": None}}])
        assert documents == [{"version": "v1alpha1", "machine": {"type": "worker"}}]


class TestMergePatch:
    @pytest.mark.parametrize("target, patch, expected", [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ])
    def test_rfc7386_examples(self, target, patch, expected):
        assert mc.merge_patch(target, patch) == expected


class TestRedaction:
    def test_secret_values_cover_every_secret(self):
        found = mc.load_config(config=CONFIG).secret_values()
        assert sorted(found) == sorted(SECRETS)

    def test_public_parts_are_not_secrets(self):
        found = mc.load_config(config=CONFIG).secret_values()
        assert "Y2VydGlmaWNhdGUtcHVibGlj" not in found
        assert "Y2x1c3Rlci1pZA==" not in found

    def test_redacted_text_has_no_secret_and_keeps_the_rest(self):
        text = mc.load_config(config=CONFIG).redacted_text()
        for secret in SECRETS:
            assert secret not in text
        assert "hostname: cp-1" in text
        assert "crt: Y2VydGlmaWNhdGUtcHVibGlj" in text
        assert "apidCheckExtKeyUsage: true" in text
        assert text.count(REDACTED) == len(SECRETS)

    def test_redact_text_on_yaml_and_literal_blocks(self):
        text = "a:\n  key: |\n    line-one\n    line-two\n  other: 1\n- password: hunter2\n  'token': \"abc\"\nflag: true\n"
        redacted = mc.redact_text(text)
        assert "line-one" not in redacted and "hunter2" not in redacted and "abc" not in redacted
        assert "  other: 1" in redacted and "flag: true" in redacted

    def test_redact_text_masks_known_values_anywhere(self):
        redacted = mc.redact_text("note: contains wxyz12.abcdefghijklmnop inline\n", known_secrets=SECRETS)
        assert redacted == "note: contains %s inline\n" % REDACTED

    def test_redact_unified_diff_keeps_markers(self):
        before = CONFIG.replace("cp-1", "old").replace("Y2x1c3Rlci1zZWNyZXQtdmFsdWU=", "b2xkLWNsdXN0ZXItc2VjcmV0")
        diff = "\n".join(difflib.unified_diff(before.splitlines(), CONFIG.splitlines(), "a", "b", lineterm=""))
        redacted = mc.redact_text(diff, diff=True)
        assert "b2xkLWNsdXN0ZXItc2VjcmV0" not in redacted and "Y2x1c3Rlci1zZWNyZXQtdmFsdWU=" not in redacted
        assert "-    hostname: old" in redacted and "+    hostname: cp-1" in redacted
        assert "-  secret: %s" % REDACTED in redacted
        assert redacted.startswith("--- a\n+++ b\n@@")

    def test_changed_secret_stays_visible_in_a_diff(self):
        diff = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n cluster:\n-  secret: b2xk\n+  secret: bmV3\n   token: same-token\n"
        redacted = mc.redact_text(diff, diff=True)
        assert "-  secret: %s\n+  secret: %s\n" % (REDACTED, REDACTED_CHANGED) in redacted
        assert "   token: %s" % REDACTED in redacted
        assert "b2xk" not in redacted and "bmV3" not in redacted and "same-token" not in redacted

    def test_redact_structure(self):
        redacted = mc.redact({"machine": {"token": "t0ps3cret", "ca": {"crt": "pub", "key": "priv"}, "keys": [{"static": {"value": "x"}}]}})
        assert redacted == {"machine": {"token": REDACTED, "ca": {"crt": "pub", "key": REDACTED},
                                        "keys": [{"static": {"value": REDACTED}}]}}


class TestHash:
    def test_hash_is_stable_across_formatting(self):
        other = CONFIG.replace("certSANs: [10.0.0.1]", "certSANs:\n    - 10.0.0.1")
        assert mc.load_config(config=CONFIG).hash() == mc.load_config(config=other).hash()

    def test_hash_changes_with_content(self):
        patched = mc.load_config(config=CONFIG, config_patches=[{"machine": {"network": {"hostname": "x"}}}])
        assert patched.hash() != mc.load_config(config=CONFIG).hash()

    def test_summary_has_no_secret(self):
        summary = mc.config_summary(CONFIG)
        assert summary == {"version": "v1alpha1", "hash": mc.load_config(config=CONFIG).hash(), "machine_type": "controlplane",
                           "documents": ["v1alpha1", "RegistryAuthConfig/registry.example.com"]}


class TestDryRun:
    DETAILS = "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n%s"

    def test_no_changes(self):
        assert mc.dry_run_has_no_changes(self.DETAILS % "No changes.")
        assert not mc.dry_run_has_no_changes(self.DETAILS % "--- a\n+++ b\n@@ -1 +1 @@\n-a: 1\n+a: 2")

    def test_maintenance_summary_is_not_no_changes(self):
        details = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
        assert mc.dry_run_diff(details) is None
        assert not mc.dry_run_has_no_changes(details)

    def test_split_unified_diff(self):
        diff = "--- a\n+++ b\n@@ -1,3 +1,3 @@\n machine:\n-  type: worker\n+  type: controlplane\n   token: x"
        before, after = mc.split_unified_diff(diff)
        assert before == "@@ -1,3 +1,3 @@\nmachine:\n  type: worker\n  token: x\n"
        assert after == "@@ -1,3 +1,3 @@\nmachine:\n  type: controlplane\n  token: x\n"

    def test_split_refuses_text_that_is_no_diff(self):
        assert mc.split_unified_diff("Node is running in maintenance mode") is None
