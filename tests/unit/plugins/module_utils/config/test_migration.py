# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The move of deprecated v1alpha1 fields to the Talos v1.14 documents (config/migration.py)."""

import base64

import pytest
import yaml

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.common.redaction import REDACTED
from ansible_collections.talos_linux.talos.plugins.module_utils.config import generation, migration
from ansible_collections.talos_linux.talos.plugins.module_utils.config.secrets_bundle import SecretsBundle

ENDPOINT = "https://cp.example:6443"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY_PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n"
# What Talos v1.14 writes that is no migration of a v1alpha1 field: new defaults a migration must not switch on.
NEW_IN_V114 = {("VolumeConfig", "EPHEMERAL"), ("FilesystemTrimConfig", None), ("SecurityProfileConfig", None)}


def b64(text):
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def bundle():
    return SecretsBundle.generate("v1.13")


def generated(bundle, machine_type, version, **options):
    text = generation.generate_machine_config(bundle, machine_type, "prod", ENDPOINT, talos_version=version,
                                              install_image="registry.example/installer:v1.13.4",
                                              kubernetes_version="1.36.3", **options)
    return list(yaml.safe_load_all(text))


def by_key(documents):
    return dict(((document.get("kind") or "v1alpha1", document.get("name")), document) for document in documents)


def config(machine=None, cluster=None, machine_type="worker", *documents):
    root = {"version": "v1alpha1", "debug": False, "persist": True,
            "machine": dict({"type": machine_type, "token": "t"}, **(machine or {})), "cluster": dict(cluster or {})}
    return [root] + list(documents)


def doc(kind, **fields):
    return dict({"apiVersion": "v1alpha1", "kind": kind}, **fields)


def check(plan):
    """What a caller does with a plan: its refusal raised as the module reports it."""
    if plan.refusal():
        raise TalosConfigError(plan.refusal())


def migrated(documents, **options):
    plan = migration.plan(documents, **options)
    check(plan)
    return plan, by_key(plan.documents)


@pytest.mark.parametrize("machine_type", ["controlplane", "worker"])
@pytest.mark.parametrize("contract", ["v1.11", "v1.13"])
def test_a_generated_config_migrates_to_what_talosctl_writes_for_v114(bundle, machine_type, contract):
    plan, documents = migrated(generated(bundle, machine_type, contract))
    expected = by_key(generated(bundle, machine_type, "v1.14"))
    for key in NEW_IN_V114:
        expected.pop(key)
    # Named as Talos names the discovery service it reads from v1alpha1.
    expected[("DiscoveryServiceConfig", "legacy")] = dict(expected.pop(("DiscoveryServiceConfig", "default")), name="legacy")
    if machine_type == "controlplane":
        # The legacy path decrypts with secretbox key2 and then reads plain text: the identity provider stays.
        providers = expected[("KubeEtcdEncryptionConfig", None)]["config"]["resources"][0]["providers"]
        providers.append({"identity": {}})
        if contract == "v1.11":  # up to the v1.11 contract the endpoint's host is an apiserver SAN in the config
            expected[("KubeAPIServerConfig", None)]["certExtraSANs"] = ["cp.example"]
    assert documents == expected
    assert not plan.conflicts and not plan.homeless
    assert migration.plan(plan.documents).documents is None  # migrated: nothing left to move


def test_an_already_migrated_config_plans_nothing(bundle):
    plan = migration.plan(generated(bundle, "controlplane", "v1.14"))
    assert plan.steps == [] and plan.documents is None and not plan.changes


def step(plan, source):
    found = [s for s in plan.steps if s.source == source]
    assert found, "no step from %s in %s" % (source, [s.source for s in plan.steps])
    return found[0]


@pytest.mark.parametrize("machine,cluster,kind,field,value", [
    ({"network": {"hostname": "node-1"}}, {}, ("HostnameConfig", None), "hostname", "node-1"),
    ({"features": {"stableHostname": True}}, {}, ("HostnameConfig", None), "auto", "stable"),
    ({"network": {"nameservers": ["1.1.1.1", "8.8.8.8"]}}, {}, ("ResolverConfig", None), "nameservers",
     [{"address": "1.1.1.1"}, {"address": "8.8.8.8"}]),
    ({"network": {"searchDomains": ["example.org"]}}, {}, ("ResolverConfig", None), "searchDomains",
     {"domains": ["example.org"]}),
    ({"network": {"disableSearchDomain": True}}, {}, ("ResolverConfig", None), "searchDomains", {"disableDefault": True}),
    ({"features": {"hostDNS": {"enabled": True, "resolveMemberNames": True}}}, {}, ("ResolverConfig", None), "hostDNS",
     {"enabled": True, "resolveMemberNames": True}),
    ({"network": {"extraHostEntries": [{"ip": "10.0.0.9", "aliases": ["gw"]}]}}, {}, ("StaticHostConfig", "10.0.0.9"),
     "hostnames", ["gw"]),
    ({"time": {"servers": ["time.example"], "bootTimeout": "2m0s"}}, {}, ("TimeSyncConfig", None), "ntp",
     {"servers": ["time.example"]}),
    ({"time": {"disabled": True}}, {}, ("TimeSyncConfig", None), "enabled", False),
    ({"network": {"kubespan": {"enabled": True, "mtu": 1400}}}, {}, ("KubeSpanConfig", None), "mtu", 1400),
    ({"env": {"HTTPS_PROXY": "http://proxy:3128"}}, {}, ("EnvironmentConfig", None), "variables", {"HTTPS_PROXY": "http://proxy:3128"}),
    ({"sysctls": {"vm.max_map_count": 262144}}, {}, ("SysctlConfig", None), "params", {"vm.max_map_count": "262144"}),
    ({"sysfs": {"a.b": "1"}}, {}, ("SysfsConfig", None), "params", {"a.b": "1"}),
    ({"kernel": {"modules": [{"name": "br_netfilter", "parameters": ["x=1"]}]}}, {}, ("KernelModuleConfig", "br_netfilter"),
     "parameters", ["x=1"]),
    ({"baseRuntimeSpecOverrides": {"process": {}}}, {}, ("CRIBaseRuntimeSpecConfig", None), "overrides", {"process": {}}),
    ({"features": {"imageCache": {"localEnabled": True}}}, {}, ("ImageCacheConfig", None), "local", {"enabled": True}),
    ({"features": {"kubePrism": {"enabled": True, "port": 7445}}}, {}, ("KubePrismConfig", None), "port", 7445),
    ({"registries": {"mirrors": {"docker.io": {"endpoints": ["https://m.example"], "overridePath": True, "skipFallback": True}}}}, {},
     ("RegistryMirrorConfig", "docker.io"), "endpoints", [{"url": "https://m.example", "overridePath": True}]),
    ({"registries": {"config": {"r.example": {"auth": {"username": "u", "password": "p"}}}}}, {},
     ("RegistryAuthConfig", "r.example"), "password", "p"),
    ({"registries": {"config": {"r.example": {"tls": {"ca": b64(PEM), "clientIdentity": {"crt": b64(PEM), "key": b64(KEY_PEM)}}}}}},
     {}, ("RegistryTLSConfig", "r.example"), "clientIdentity", {"cert": PEM, "key": KEY_PEM}),
    ({"udev": {"rules": ["SUBSYSTEM==\"drm\", GROUP=\"44\""]}}, {}, ("UdevRulesConfig", None), "rules",
     ["SUBSYSTEM==\"drm\", GROUP=\"44\""]),
    ({"pods": [{"kind": "Pod", "metadata": {"name": "nginx"}}]}, {}, ("KubeStaticPodConfig", "default-nginx"), "pod",
     {"kind": "Pod", "metadata": {"name": "nginx"}}),
    ({"kubelet": {"image": "kubelet:v1.36.3", "extraArgs": {"max-pods": "200"}, "extraConfig": {"serializeImagePulls": False},
                  "clusterDNS": ["10.96.0.10"]}}, {},
     ("KubeletConfig", None), "config", {"serializeImagePulls": False}),
    ({"kubelet": {"nodeIP": {"validSubnets": ["10.0.0.0/8"]}, "registerWithFQDN": True}}, {}, ("KubeNodeConfig", None),
     "nodeIP", {"validSubnets": ["10.0.0.0/8"]}),
    ({"nodeLabels": {"rack": "r1"}, "nodeAnnotations": {"a": "b"}}, {}, ("KubeNodeConfig", None), "annotations", {"a": "b"}),
    ({}, {"clusterName": "prod", "controlPlane": {"endpoint": ENDPOINT}}, ("KubeClusterConfig", None), "endpoint", ENDPOINT),
    ({}, {"network": {"dnsDomain": "cluster.local", "podSubnets": ["10.244.0.0/16"]}}, ("KubeNetworkConfig", None),
     "podSubnets", ["10.244.0.0/16"]),
    ({}, {"id": "aWQ=", "secret": "c2VjcmV0"}, ("DiscoveryIdentityConfig", None), "clusterID", "aWQ="),
    ({}, {"discovery": {"enabled": True, "registries": {"kubernetes": {"disabled": True}, "service": {"endpoint": "https://d.example/"}}}},
     ("DiscoveryServiceConfig", "legacy"), "endpoint", "https://d.example/"),
    ({}, {"ca": {"crt": b64(PEM), "key": ""}, "acceptedCAs": [b64(PEM)]}, ("KubeAPIServerCAConfig", None), "acceptedCAs", [PEM, PEM]),
    ({"install": {"disk": "/dev/vda", "image": "installer:v1"}}, {}, ("UnattendedInstallConfig", None), "provisioning",
     {"diskSelector": {"match": 'disk.dev_path == "/dev/vda"'}, "wipe": False}),
])
def test_each_field_moves_to_its_document(machine, cluster, kind, field, value):
    plan, documents = migrated(config(machine, cluster))
    assert documents[kind][field] == value
    root = documents[("v1alpha1", None)]
    for section, moved in (("machine", machine), ("cluster", cluster)):
        for key in moved:
            assert key not in root[section], "%s.%s stayed in v1alpha1" % (section, key)


@pytest.mark.parametrize("cluster,kind,field,value", [
    ({"apiServer": {"image": "apiserver:v1", "certSANs": ["api.example"], "extraArgs": {"v": "2"}}}, ("KubeAPIServerConfig", None),
     "certExtraSANs", ["api.example"]),
    ({"controlPlane": {"endpoint": ENDPOINT, "localAPIServerPort": 7443}}, ("KubeAPIServerConfig", None), "apiPort", 7443),
    ({"apiServer": {"admissionControl": [{"name": "PodSecurity", "configuration": {"kind": "x"}}]}},
     ("KubeAdmissionControlConfig", "PodSecurity"), "configuration", {"kind": "x"}),
    ({"apiServer": {"auditPolicy": {"kind": "Policy", "rules": [{"level": "None"}]}}}, ("KubeAuditPolicyConfig", None),
     "configuration", {"kind": "Policy", "rules": [{"level": "None"}]}),
    ({"aggregatorCA": {"crt": b64(PEM), "key": b64(KEY_PEM)}}, ("KubeAggregatorCAConfig", None), "issuingCA",
     {"cert": PEM, "key": KEY_PEM}),
    ({"ca": {"crt": b64(PEM), "key": b64(KEY_PEM)}}, ("KubeAPIServerCAConfig", None), "issuingCA", {"cert": PEM, "key": KEY_PEM}),
    ({"controllerManager": {"image": "cm:v1", "extraArgs": {"a": "b"}}}, ("KubeControllerManagerConfig", None), "extraArgs", {"a": "b"}),
    ({"scheduler": {"image": "s:v1"}}, ("KubeSchedulerConfig", None), "config", {}),
    ({"proxy": {"disabled": True, "mode": "ipvs"}}, ("KubeProxyConfig", None), "enabled", False),
    ({"coreDNS": {"disabled": True}}, ("KubeCoreDNSConfig", None), "enabled", False),
    ({"network": {"cni": {"name": "flannel", "flannel": {"extraArgs": ["--iface=eth1"]}}}}, ("KubeFlannelCNIConfig", None),
     "extraArgs", ["--iface=eth1"]),
    ({"network": {"cni": {"name": "custom", "urls": ["https://cni.example/cni.yaml"]}}},
     ("KubeExternalManifestConfig", "custom-cni"), "url", "https://cni.example/cni.yaml"),
    ({"extraManifests": ["https://m.example/a.yaml"], "extraManifestHeaders": {"Token": "abc"}},
     ("KubeExternalManifestConfig", "m.example-a.yaml"), "headers", {"Token": "abc"}),
    ({"inlineManifests": [{"name": "ns", "contents": "kind: Namespace"}]}, ("KubeInlineManifestConfig", "ns"), "manifest",
     "kind: Namespace"),
])
def test_each_controlplane_field_moves_to_its_document(cluster, kind, field, value):
    _plan, documents = migrated(config({}, cluster, "controlplane"))
    assert documents[kind][field] == value


def test_controller_manager_and_scheduler_switches_join_their_documents():
    _plan, documents = migrated(config({"controlPlane": {"controllerManager": {"disabled": True}, "scheduler": {"disabled": True}}},
                                       {"controllerManager": {"image": "cm:v1"}}, "controlplane"))
    assert documents[("KubeControllerManagerConfig", None)] == {
        "apiVersion": "v1alpha1", "kind": "KubeControllerManagerConfig", "image": "cm:v1", "enabled": False}
    assert documents[("KubeSchedulerConfig", None)]["enabled"] is False
    assert "controlPlane" not in documents[("v1alpha1", None)]["machine"]


def test_a_static_hostname_wins_over_the_stable_one():
    plan, documents = migrated(config({"network": {"hostname": "node-1"}, "features": {"stableHostname": True}}))
    assert documents[("HostnameConfig", None)] == {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "node-1"}
    assert ".machine.features.stableHostname: the static hostname wins over it, in v1alpha1 too" in plan.dropped


def test_secretbox_keeps_its_key_name_and_aescbc_stays_aescbc():
    _plan, documents = migrated(config({}, {"secretboxEncryptionSecret": "c2I=", "aescbcEncryptionSecret": "YWU="}, "controlplane"))
    assert documents[("KubeEtcdEncryptionConfig", None)]["config"] == {"resources": [{"providers": [
        {"secretbox": {"keys": [{"name": "key2", "secret": "c2I="}]}},
        {"aescbc": {"keys": [{"name": "key1", "secret": "YWU="}]}},
        {"identity": {}},
    ], "resources": ["secrets"]}]}


def test_authorizers_are_node_and_rbac_then_the_users_in_order():
    webhook = {"name": "hook", "type": "Webhook", "webhook": {"timeout": "3s"}}
    plan, documents = migrated(config({}, {"apiServer": {"authorizationConfig": [webhook]}}, "controlplane"))
    authorizers = [s.name for s in plan.steps if s.kind == "KubeAuthorizerConfig"]
    assert authorizers == ["node", "rbac", "hook"]
    assert documents[("KubeAuthorizerConfig", "node")]["type"] == "Node"
    assert documents[("KubeAuthorizerConfig", "rbac")]["type"] == "RBAC"
    assert documents[("KubeAuthorizerConfig", "hook")] == dict(webhook, apiVersion="v1alpha1", kind="KubeAuthorizerConfig")


def test_a_users_own_rbac_authorizer_is_not_doubled():
    plan, _documents = migrated(config({}, {"apiServer": {"authorizationConfig": [{"name": "my-rbac", "type": "RBAC"}]}},
                                       "controlplane"))
    assert [s.name for s in plan.steps if s.kind == "KubeAuthorizerConfig"] == ["node", "my-rbac"]


@pytest.mark.parametrize("cluster,labels,taints", [
    ({}, {"node-role.kubernetes.io/control-plane": "", "rack": "r1"}, {"node-role.kubernetes.io/control-plane": "NoSchedule"}),
    ({"allowSchedulingOnControlPlanes": True}, {"node-role.kubernetes.io/control-plane": "", "rack": "r1"}, None),
    ({"allowSchedulingOnMasters": True}, {"node-role.kubernetes.io/control-plane": "", "rack": "r1"}, None),
])
def test_control_plane_label_and_taint_become_explicit(cluster, labels, taints):
    _plan, documents = migrated(config({"nodeLabels": {"rack": "r1"}}, cluster, "controlplane"))
    node = documents[("KubeNodeConfig", None)]
    assert node["labels"] == labels
    assert node.get("taints") == taints
    assert "allowSchedulingOnControlPlanes" not in documents[("v1alpha1", None)]["cluster"]


def test_a_workers_labels_stay_as_given():
    _plan, documents = migrated(config({"nodeLabels": {"rack": "r1"}, "nodeTaints": {"gpu": "true:NoSchedule"}}))
    assert documents[("KubeNodeConfig", None)] == {"apiVersion": "v1alpha1", "kind": "KubeNodeConfig", "nodeIP": {},
                                                   "labels": {"rack": "r1"}, "taints": {"gpu": "true:NoSchedule"}}


@pytest.mark.parametrize("install,wipe", [({"disk": "/dev/sda"}, False), ({"disk": "/dev/sda", "wipe": True}, True)])
def test_install_does_not_start_wiping(install, wipe):
    _plan, documents = migrated(config({"install": install}))
    assert documents[("UnattendedInstallConfig", None)]["provisioning"]["wipe"] is wipe
    assert documents[("UnattendedInstallConfig", None)]["installer"] == {}


def test_service_account_issuer_is_the_cluster_endpoint():
    _plan, documents = migrated(config({}, {"controlPlane": {"endpoint": ENDPOINT}, "serviceAccount": {"key": b64(KEY_PEM)}},
                                       "controlplane"))
    assert documents[("KubeServiceAccountConfig", None)]["issuer"] == {"privateKey": KEY_PEM, "issuerURL": ENDPOINT}


def test_controlplane_only_documents_are_not_written_for_a_worker():
    plan, documents = migrated(config({}, {"network": {"cni": {"name": "flannel"}}, "coreDNS": {"disabled": False}}))
    assert ("KubeFlannelCNIConfig", None) not in documents and ("KubeCoreDNSConfig", None) not in documents
    assert any(d.startswith(".cluster.network.cni: a worker") for d in plan.dropped)


@pytest.mark.parametrize("machine,cluster,document,message", [
    ({"network": {"hostname": "a"}}, {}, doc("HostnameConfig", hostname="a"), "static hostname is already set in v1alpha1 config"),
    ({"network": {"nameservers": ["1.1.1.1"]}}, {}, doc("ResolverConfig", searchDomains={"disableDefault": True}),
     ".machine.network.nameservers is already set in v1alpha1 config"),
    ({"time": {"servers": ["a"]}}, {}, doc("TimeSyncConfig", ntp={"servers": ["a"]}),
     "time servers cannot be specified in both v1alpha1 and new-style configuration"),
    ({"kubelet": {"image": "k:v1"}}, {}, doc("KubeletConfig", image="k:v1", config={}),
     "kubelet config is already set in v1alpha1 config (.machine.kubelet)"),
    ({"install": {"disk": "/dev/sda"}}, {}, doc("UnattendedInstallConfig", provisioning={"diskSelector": {"match": "true"}}),
     "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)"),
    ({"nodeTaints": {"a": "NoSchedule"}}, {}, doc("KubeNodeConfig", taints={"a": "NoSchedule"}),
     ".machine.nodeTaints is already set in v1alpha1 config"),
    ({}, {"clusterName": "prod"}, doc("KubeClusterConfig", clusterName="prod"), "cluster name is already set in the v1alpha1 config"),
    ({}, {"allowSchedulingOnControlPlanes": True}, doc("KubeNodeConfig", nodeIP={}),
     ".cluster.allowSchedulingOnControlPlanes is already set in v1alpha1 config"),
    ({}, {"id": "x"}, doc("DiscoveryIdentityConfig", clusterID="x"), "cluster identity is already configured"),
    ({}, {"network": {"dnsDomain": "cluster.local"}}, doc("KubeNetworkConfig", dnsDomain="cluster.local"),
     "cluster network config is already set in the v1alpha1 config"),
    ({"network": {"kubespan": {"enabled": True}}}, {}, doc("KubeSpanConfig", enabled=True),
     "kubespan is already configured in v1alpha1 machine.network.kubespan"),
])
def test_a_field_set_in_both_places_is_a_conflict_even_when_equal(machine, cluster, document, message):
    plan = migration.plan(config(machine, cluster, "worker", document))
    assert len(plan.conflicts) == 1
    assert document["kind"] in plan.conflicts[0] and "in the v1alpha1 document" in plan.conflicts[0]
    assert message in plan.conflicts[0]
    with pytest.raises(TalosConfigError, match="refuses together even with equal values"):
        check(plan)


def test_the_controlplane_conflicts_name_both_places():
    plan = migration.plan(config({}, {"serviceAccount": {"key": b64(KEY_PEM)}, "secretboxEncryptionSecret": "c2I="}, "controlplane",
                                 doc("KubeServiceAccountConfig", issuer={}), doc("KubeEtcdEncryptionConfig", config={})))
    assert [c.split(" in the v1alpha1")[0] for c in plan.conflicts] == [
        "The config sets .cluster.serviceAccount", "The config sets .cluster.secretboxEncryptionSecret"]
    assert "(and 1 more problem, listed in conflicts and homeless)" in plan.refusal()


def test_a_merged_document_with_another_value_is_a_conflict_and_an_equal_one_is_not():
    differ = migration.plan(config({"sysctls": {"vm.a": "1"}}, {}, "worker", doc("SysctlConfig", params={"vm.a": "2"})))
    assert differ.conflicts == [
        "The config sets .machine.sysctls.vm.a in the v1alpha1 document and params.vm.a in its SysctlConfig document to another "
        "value, and Talos v1.14 uses the document's: make them equal or remove one before migrating."]
    equal = migration.plan(config({"sysctls": {"vm.a": "1"}}, {}, "worker", doc("SysctlConfig", params={"vm.a": "1", "vm.b": "2"})))
    assert equal.conflicts == [] and by_key(equal.documents)[("SysctlConfig", None)]["params"] == {"vm.a": "1", "vm.b": "2"}


@pytest.mark.parametrize("machine,cluster,field", [
    ({}, {"apiServer": {"extraVolumes": [{"hostPath": "/a", "mountPath": "/a"}]}}, ".cluster.apiServer.extraVolumes"),
    ({}, {"controllerManager": {"extraVolumes": [{"hostPath": "/a", "mountPath": "/a"}]}}, ".cluster.controllerManager.extraVolumes"),
    ({}, {"scheduler": {"extraVolumes": [{"hostPath": "/a", "mountPath": "/a"}]}}, ".cluster.scheduler.extraVolumes"),
    ({"kubelet": {"extraMounts": [{"destination": "/var/a", "source": "/var/a"}]}}, {}, ".machine.kubelet.extraMounts"),
    ({"install": {"disk": "/dev/sda", "extraKernelArgs": ["console=ttyS0"]}}, {}, ".machine.install.extraKernelArgs"),
    ({"install": {"disk": "/dev/sda", "grubUseUKICmdline": False}}, {}, ".machine.install.grubUseUKICmdline"),
    ({}, {"apiServer": {"extraArgs": {"oidc-issuer-url": "https://id.example"}}}, ".cluster.apiServer.extraArgs.oidc-issuer-url"),
    ({}, {"discovery": {"enabled": True, "registries": {"service": {}}}}, ".cluster.discovery.registries.kubernetes"),
    ({"install": {"disk": "/dev/sda", "bootloader": "sd-boot"}}, {}, ".machine.install.bootloader"),
    ({"kubelet": {"image": "k:v1", "someFutureField": {"a": 1}}}, {}, ".machine.kubelet.someFutureField"),
    ({}, {"proxy": {"image": "p:v1", "someFutureField": True}}, ".cluster.proxy.someFutureField"),
])
def test_a_field_without_a_home_is_refused_unless_accepted(machine, cluster, field):
    documents = config(machine, cluster, "controlplane")
    plan = migration.plan(documents)
    assert len(plan.homeless) == 1 and plan.homeless[0].startswith(field + " has no home in the Talos v1.14 documents")
    with pytest.raises(TalosConfigError, match="name it in accept_dropped"):
        check(plan)
    accepted = migration.plan(documents, accept_dropped=[field.lstrip(".")])
    check(accepted)
    assert any(dropped.startswith(field + ":") for dropped in accepted.dropped)
    root = by_key(accepted.documents)[("v1alpha1", None)]
    for key in field.lstrip(".").split(".")[:-1]:
        root = root.get(key) or {}
    assert field.split(".")[-1] not in root
    if not field.endswith("kubernetes"):
        assert field.split(".")[-1] not in yaml.safe_dump(accepted.documents)


def test_accept_dropped_naming_no_homeless_field_is_refused():
    with pytest.raises(TalosConfigError, match=r"accept_dropped names \.machine\.kubelet\.extraMounts, which the config does not set"):
        migration.plan(config({"kubelet": {"image": "k:v1"}}), accept_dropped=["machine.kubelet.extraMounts"])


def test_sections_with_no_mechanical_translation_stay_and_are_listed():
    disks = [{"device": "/dev/sdb", "partitions": [{"mountpoint": "/var/mnt/data"}]}]
    plan, documents = migrated(config({"disks": disks, "network": {"hostname": "a"}}))
    assert len(plan.kept) == 1 and plan.kept[0].startswith(".machine.disks: Talos v1.14 finds a UserVolumeConfig's partition by its label u-<name>")
    assert "mount it under /var/mnt/<name> instead of the legacy mountpoint" in plan.kept[0]
    assert documents[("v1alpha1", None)]["machine"]["disks"] == disks


def test_a_config_must_hold_one_v1alpha1_document():
    with pytest.raises(TalosConfigError, match="exactly one v1alpha1 document, it holds 0"):
        migration.plan([doc("KubeletConfig")])


def test_steps_show_no_secret():
    cluster = {"serviceAccount": {"key": b64(KEY_PEM)}, "secretboxEncryptionSecret": "c2VjcmV0c2VjcmV0", "id": "aWQ=",
               "secret": "c2VjcmV0c2VjcmV0Mg==", "aggregatorCA": {"crt": b64(PEM), "key": b64(KEY_PEM)}}
    plan = migration.plan(config({}, cluster, "controlplane"))
    shown = [s.as_dict() for s in plan.steps]
    text = repr(shown)
    for secret in ("c2VjcmV0c2VjcmV0", "c2VjcmV0c2VjcmV0Mg==", KEY_PEM, "MHcC"):
        assert secret not in text
    assert step(plan, "cluster.serviceAccount").as_dict()["value"]["privateKey"] == REDACTED
    assert step(plan, "cluster.aggregatorCA").as_dict()["value"] == {"cert": PEM, "key": REDACTED}
    assert step(plan, "cluster.id").as_dict() == {"from": ".cluster.id", "to": "DiscoveryIdentityConfig", "field": "clusterID",
                                                  "value": "aWQ="}


STATE_ENCRYPTION = {"provider": "luks2", "cipher": "aes-xts-plain64", "keySize": 512, "blockSize": 4096, "options": ["no_read_workqueue"],
                    "keys": [{"slot": 0, "static": {"passphrase": "hunter2hunter2"}}, {"slot": 1, "kms": {"endpoint": "https://kms.example"}},
                             {"slot": 2, "tpm": {"checkSecurebootStatusOnEnroll": True}}]}


def test_system_disk_encryption_moves_to_the_volume_configs():
    encryption = {"state": STATE_ENCRYPTION, "ephemeral": {"keys": [{"slot": 0, "nodeID": {}}]}}
    plan, documents = migrated(config({"systemDiskEncryption": encryption}))
    assert documents[("VolumeConfig", "STATE")]["encryption"] == STATE_ENCRYPTION
    # v1alpha1 reads a missing provider as LUKS2.
    assert documents[("VolumeConfig", "EPHEMERAL")]["encryption"] == {"provider": "luks2", "keys": [{"slot": 0, "nodeID": {}}]}
    assert "systemDiskEncryption" not in documents[("v1alpha1", None)]["machine"] and plan.kept == []
    assert step(plan, "machine.systemDiskEncryption.state").as_dict()["value"]["keys"][0]["static"]["passphrase"] == REDACTED
    assert "hunter2hunter2" not in repr([s.as_dict() for s in plan.steps])


def test_system_disk_encryption_joins_a_volume_config_without_encryption_and_conflicts_with_one_that_has_it():
    ephemeral = doc("VolumeConfig", name="EPHEMERAL", mount={"secure": True})
    _plan, documents = migrated(config({"systemDiskEncryption": {"ephemeral": {"keys": [{"slot": 0, "nodeID": {}}]}}}, {}, "worker",
                                       ephemeral))
    assert documents[("VolumeConfig", "EPHEMERAL")] == dict(ephemeral, encryption={"provider": "luks2", "keys": [{"slot": 0, "nodeID": {}}]})
    plan = migration.plan(config({"systemDiskEncryption": {"state": STATE_ENCRYPTION}}, {}, "worker",
                                 doc("VolumeConfig", name="STATE", encryption={"provider": "luks2", "keys": []})))
    assert plan.conflicts == [
        "The config sets .machine.systemDiskEncryption.state in the v1alpha1 document and has a VolumeConfig/STATE document, which "
        "Talos v1.14 refuses together even with equal values ('system disk encryption for \"STATE\" is configured in both "
        "v1alpha1.Config and VolumeConfig'): remove one of them before migrating."]


def test_an_unknown_system_disk_encryption_key_is_refused_never_lost():
    plan = migration.plan(config({"systemDiskEncryption": {"state": {"keys": [{"slot": 0, "tpm": {"pcrs": [7, 11]}}]}}}))
    assert plan.homeless[0].startswith(".machine.systemDiskEncryption.state.keys.tpm.pcrs has no home")


def test_a_file_replacing_one_under_etc_moves_to_an_etc_file_config_and_the_cri_customization_to_its_document():
    files = [{"path": "/etc/nfsmount.conf", "op": "overwrite", "permissions": "0o600", "content": "[NFSMount_Global_Options]\n"},
             {"path": "/etc/cri/conf.d/20-customization.part", "op": "create", "permissions": 0o644, "content": "[metrics]\n"}]
    plan, documents = migrated(config({"files": files}))
    assert documents[("EtcFileConfig", "nfsmount.conf")] == doc(
        "EtcFileConfig", name="nfsmount.conf", contents="[NFSMount_Global_Options]\n", mode=0o600)
    # "customization" is the name Talos gives the v1alpha1 file, which no document may take.
    assert documents[("CRICustomizationConfig", "customization-v1alpha1")]["content"] == "[metrics]\n"
    assert "files" not in documents[("v1alpha1", None)]["machine"] and plan.kept == []


@pytest.mark.parametrize("file,why", [
    ({"path": "/var/etc/a.conf", "op": "create", "permissions": 0o644}, "the v1alpha1 path writes it under /var"),
    ({"path": "/usr/local/etc/a.conf", "op": "overwrite", "permissions": 0o644}, "documents write files only under /etc"),
    ({"path": "/etc/a.conf", "op": "append", "permissions": 0o644}, "the v1alpha1 path appends to the file Talos has there"),
    ({"path": "/etc/a.conf", "op": "create", "permissions": 0o644}, "refuses to create a file outside /var"),
    ({"path": "/etc/hosts", "op": "overwrite", "permissions": 0o644}, "Talos manages /etc/hosts"),
    ({"path": "/etc/kubernetes/manifests/pod.yaml", "op": "create", "permissions": 0o644}, "Talos manages /etc/kubernetes"),
    ({"path": "/etc/a.conf", "op": "overwrite"}, "EtcFileConfig reads no mode as 0644"),
])
def test_a_file_no_document_writes_as_the_v1alpha1_path_does_is_refused_unless_accepted(file, why):
    documents = config({"files": [dict(file, content="x")]})
    plan = migration.plan(documents)
    assert len(plan.homeless) == 1 and plan.homeless[0].startswith(".machine.files.%s has no home" % file["path"])
    assert why in plan.homeless[0]
    accepted = migration.plan(documents, accept_dropped=["machine.files.%s" % file["path"]])
    check(accepted)
    assert "files" not in by_key(accepted.documents)[("v1alpha1", None)]["machine"]


def test_the_cri_customization_keeps_its_place_among_the_configs_own():
    files = [{"path": "/etc/cri/conf.d/20-customization.part", "op": "create", "permissions": 0o644, "content": "[a]\n"}]
    plan = migration.plan(config({"files": files}, {}, "worker", doc("CRICustomizationConfig", name="customization-b", content="")))
    assert plan.homeless[0].startswith(".machine.files./etc/cri/conf.d/20-customization.part has no home")
    assert "would merge after customization-b" in plan.homeless[0]
    _plan, documents = migrated(config({"files": files}, {}, "worker", doc("CRICustomizationConfig", name="zz", content="")))
    assert documents[("CRICustomizationConfig", "customization-v1alpha1")]["content"] == "[a]\n"


def test_a_named_interface_moves_to_its_link_dhcp_vlan_and_vip_documents():
    interfaces = [{
        "interface": "eth0", "addresses": ["10.5.0.2/24", "10.5.0.3", "fd00::2"], "mtu": 9000,
        "routes": [{"network": "0.0.0.0/0", "gateway": "10.5.0.1", "metric": 100}, {"network": "10.9.0.0/16", "gateway": "10.5.0.254"}],
        "dhcp": True, "dhcpOptions": {"routeMetric": 512, "ipv6": True},
        "vip": {"ip": "10.5.0.10"},
        "vlans": [{"vlanId": 100, "addresses": ["192.168.100.2/24", "192.168.100.3"], "mtu": 1500, "dhcp": True,
                   "routes": [{"network": "192.168.0.0/16", "gateway": "192.168.100.1", "mtu": 1400}],
                   "vip": {"ip": "192.168.100.10", "hcloud": {"apiToken": "hcloud-token"}}}],
    }]
    plan, documents = migrated(config({"network": {"interfaces": interfaces}}))
    # An interface's address without a prefix length is a host address to Talos.
    assert documents[("LinkConfig", "eth0")] == doc(
        "LinkConfig", name="eth0", mtu=9000,
        addresses=[{"address": "10.5.0.2/24"}, {"address": "10.5.0.3/32"}, {"address": "fd00::2/128"}],
        routes=[{"gateway": "10.5.0.1", "metric": 100}, {"destination": "10.9.0.0/16", "gateway": "10.5.0.254"}])
    # The v1alpha1 path asks DHCP without a client identifier, IPv4 unless told otherwise.
    assert documents[("DHCPv4Config", "eth0")] == doc("DHCPv4Config", name="eth0", clientIdentifier="none", routeMetric=512)
    assert documents[("DHCPv6Config", "eth0")] == doc("DHCPv6Config", name="eth0", clientIdentifier="none", routeMetric=512)
    assert documents[("Layer2VIPConfig", "10.5.0.10")] == doc("Layer2VIPConfig", name="10.5.0.10", link="eth0")
    # A VLAN address without a prefix length is one Talos skips.
    assert documents[("VLANConfig", "eth0.100")] == doc(
        "VLANConfig", name="eth0.100", vlanID=100, parent="eth0", mtu=1500, addresses=[{"address": "192.168.100.2/24"}],
        routes=[{"destination": "192.168.0.0/16", "gateway": "192.168.100.1", "mtu": 1400}])
    assert ".machine.network.interfaces.eth0.vlans.100.addresses: 192.168.100.3 has no prefix length, which Talos skips on a VLAN" in plan.dropped
    assert documents[("DHCPv4Config", "eth0.100")] == doc("DHCPv4Config", name="eth0.100", clientIdentifier="none")
    assert ("DHCPv6Config", "eth0.100") not in documents
    assert documents[("HCloudVIPConfig", "192.168.100.10")] == doc("HCloudVIPConfig", name="192.168.100.10", link="eth0.100",
                                                                   apiToken="hcloud-token")
    assert "network" not in documents[("v1alpha1", None)]["machine"] and plan.kept == []
    assert plan.warnings == [
        "With a link document in the config, Talos v1.14 stops the DHCP it runs by default on every link the config does not "
        "name: links left out of .machine.network.interfaces get no address unless a document configures them."]
    assert "hcloud-token" not in repr([s.as_dict() for s in plan.steps])
    assert migration.plan(plan.documents).documents is None


@pytest.mark.parametrize("interface,why", [
    ({"deviceSelector": {"hardwareAddr": "00:00:5e:*"}, "dhcp": True}, "configures every link its deviceSelector matches"),
    ({"interface": "eth1", "ignore": True}, "no document leaves a link alone as ignore does"),
    ({"interface": "bond0", "bond": {"interfaces": ["eth1", "eth2"], "mode": "active-backup", "primary": "eth1"}},
     "BondConfig has no primary link"),
    ({"interface": "bond0", "bond": {"interfaces": ["eth1"], "mode": "active-backup", "arpIPTarget": ["10.0.0.1"]}},
     "leaves .bond.arpIPTarget out of the bond"),
    ({"interface": "bond0", "bond": {"deviceSelectors": [{"hardwareAddr": "00:00:5e:*"}], "mode": "802.3ad"}}, "deviceSelectors"),
    ({"interface": "bond0", "bond": {"interfaces": ["eth1"], "mode": "round-robin"}}, "refuses bond mode 'round-robin'"),
    ({"interface": "bond0", "bond": {"interfaces": [], "mode": "802.3ad"}}, "a bond without interfaces"),
    ({"interface": "bond0", "bond": {}}, "a bond without interfaces"),
    ({"interface": "wg0", "wireguard": {}}, "without a private key"),
    ({"interface": "br0", "bridge": {"interfaces": ["eth1"], "stp": {"enabled": True, "forwardDelay": 4}}}, "bridge forwardDelay"),
    ({"interface": "eth1", "bridgePort": {"master": "br0"}}, "its bridge br0 is no v1alpha1 bridge this migration moves"),
    ({"interface": "wg0", "wireguard": {"privateKey": "k", "peers": [{"publicKey": "p", "endpoint": "vpn.example:51820"}]}},
     "vpn.example:51820 is not one"),
    ({"interface": "wg0", "wireguard": {"privateKey": "k", "peers": [{"publicKey": "p", "allowedIPs": ["10.1.0.1"]}]}},
     "refuses allowed IP 10.1.0.1 without a prefix length"),
    ({"interface": "wg0", "wireguard": {"peers": [{"publicKey": "p"}]}}, "without a private key"),
    ({"interface": "du0", "dummy": True, "bond": {"interfaces": ["eth1"]}}, "both bond and dummy"),
    ({"interface": "eth1", "vip": {"ip": "10.0.0.9", "equinixMetal": {"apiToken": "t"}}}, "an Equinix Metal VIP has no document"),
    ({"interface": "eth1", "dhcp": True, "dhcpOptions": {"ipv6": True, "duidv6": "00:01:00:01"}}, "ignores DUID 00:01:00:01"),
])
def test_an_interface_without_a_mechanical_translation_stays_in_v1alpha1_beside_the_moved_ones(interface, why):
    interfaces = [interface, {"interface": "eth9", "dhcp": True}]
    plan, documents = migrated(config({"network": {"interfaces": interfaces}}))
    assert documents[("v1alpha1", None)]["machine"]["network"]["interfaces"] == [interface]
    assert len(plan.kept) == 1 and why in plan.kept[0] and plan.kept[0].endswith("Talos v1.14 still reads it from v1alpha1")
    assert ("DHCPv4Config", "eth9") in documents and len(plan.warnings) == 1


def test_no_default_dhcp_warning_when_the_config_already_has_a_link_document():
    plan, _documents = migrated(config({"network": {"interfaces": [{"interface": "eth0", "dhcp": True}]}}, {}, "worker",
                                       doc("LinkConfig", name="eth1")))
    assert plan.warnings == []


def test_a_bridge_moves_to_its_bridge_config():
    bridge = {"interface": "br0", "bridge": {"interfaces": ["eth1", "eth2"], "stp": {"enabled": True}, "vlan": {"vlanFiltering": False}},
              "addresses": ["10.6.0.2/24"], "dhcp": False}
    plan, documents = migrated(config({"network": {"interfaces": [bridge]}}))
    assert documents[("BridgeConfig", "br0")] == doc("BridgeConfig", name="br0", links=["eth1", "eth2"], stp={"enabled": True},
                                                     vlan={"filtering": False}, addresses=[{"address": "10.6.0.2/24"}])
    assert plan.kept == [] and ("DHCPv4Config", "br0") not in documents


WG_PRIVATE = b64("p" * 32)
WG_PEER = b64("q" * 32)
WG_PSK_LIKE = b64("r" * 32)


def test_a_bond_moves_to_its_bond_config_with_its_options():
    bond = {"interface": "bond0", "bond": {
        "interfaces": ["eth1", "eth2"], "mode": "802.3ad", "lacpRate": "fast", "xmitHashPolicy": "layer3+4", "miimon": 100,
        "updelay": 200, "downdelay": 200, "adActorSysPrio": 0, "tlbDynamicLb": 1, "resendIgmp": 3, "peerNotifyDelay": 5,
        "useCarrier": True, "adActorSystem": "00:11:22:33:44:55"},
        "addresses": ["10.7.0.2/24"], "mtu": 9000, "dhcp": False}
    plan, documents = migrated(config({"network": {"interfaces": [bond]}}))
    # A zero option is the v1alpha1 default, which BondConfig leaves out; its names differ from v1alpha1's in places.
    assert documents[("BondConfig", "bond0")] == doc(
        "BondConfig", name="bond0", links=["eth1", "eth2"], bondMode="802.3ad", lacpRate="fast", xmitHashPolicy="layer3+4",
        miimon=100, updelay=200, downdelay=200, tlbLogicalLb=1, resendIGMP=3, peerNotifDelay=5, useCarrier=True,
        mtu=9000, addresses=[{"address": "10.7.0.2/24"}])
    assert plan.kept == [] and "network" not in documents[("v1alpha1", None)]["machine"]
    assert plan.dropped == [".machine.network.interfaces.bond0.bond.adActorSystem: Talos's v1alpha1 path never sets it on "
                            "the bond (SetBondMasterLegacy) and BondConfig has no such field"]
    assert {"from": ".machine.network.interfaces.bond0", "to": "BondConfig/bond0", "field": None} == dict(
        (key, step.as_dict()[key]) for key in ("from", "to", "field") for step in plan.steps if step.kind == "BondConfig")


def test_a_bond_without_a_mode_is_balance_rr_as_the_v1alpha1_path_reads_it():
    bond = {"interface": "bond0", "bond": {"interfaces": ["eth1"], "mode": ""}, "dhcp": True}
    _plan, documents = migrated(config({"network": {"interfaces": [bond]}}))
    assert documents[("BondConfig", "bond0")] == doc("BondConfig", name="bond0", links=["eth1"], bondMode="balance-rr")
    assert documents[("DHCPv4Config", "bond0")] == doc("DHCPv4Config", name="bond0", clientIdentifier="none")


def test_a_bond_in_a_mode_without_a_primary_moves_and_a_primary_keeps_it():
    moved = {"interface": "bond0", "bond": {"interfaces": ["eth1", "eth2"], "mode": "active-backup"}}
    _plan, documents = migrated(config({"network": {"interfaces": [moved]}}))
    assert documents[("BondConfig", "bond0")]["bondMode"] == "active-backup"
    kept = {"interface": "bond0", "bond": {"interfaces": ["eth1", "eth2"], "mode": "active-backup", "primary": "eth2"}}
    plan = migration.plan(config({"network": {"interfaces": [kept]}}))
    # Nothing else to migrate: the config stays as it is.
    assert plan.documents is None and plan.steps == [] and "SetBondMasterLegacy" in plan.kept[0]


def test_a_wireguard_link_moves_to_its_wireguard_config_without_showing_its_keys():
    wireguard = {"interface": "wg0", "addresses": ["10.8.0.1/24"], "mtu": 1420, "wireguard": {
        "privateKey": WG_PRIVATE, "listenPort": 51820, "firewallMark": 7,
        "peers": [{"publicKey": WG_PEER, "endpoint": "192.0.2.1:51820", "persistentKeepaliveInterval": "25s",
                   "allowedIPs": ["10.8.0.0/24", "fd08::/64"]},
                  {"publicKey": WG_PSK_LIKE, "endpoint": "[2001:db8::1]:51820"}]}}
    plan, documents = migrated(config({"network": {"interfaces": [wireguard]}}))
    assert documents[("WireguardConfig", "wg0")] == doc(
        "WireguardConfig", name="wg0", privateKey=WG_PRIVATE, listenPort=51820, firewallMark=7, mtu=1420,
        addresses=[{"address": "10.8.0.1/24"}],
        peers=[{"publicKey": WG_PEER, "endpoint": "192.0.2.1:51820", "persistentKeepaliveInterval": "25s",
                "allowedIPs": ["10.8.0.0/24", "fd08::/64"]}, {"publicKey": WG_PSK_LIKE, "endpoint": "[2001:db8::1]:51820"}])
    assert plan.kept == [] and WG_PRIVATE not in repr([step.as_dict() for step in plan.steps])


def test_a_dummy_link_moves_to_its_dummy_link_config():
    dummy = {"interface": "dummy0", "dummy": True, "addresses": ["169.254.10.1/32"]}
    plan, documents = migrated(config({"network": {"interfaces": [dummy]}}))
    assert documents[("DummyLinkConfig", "dummy0")] == doc("DummyLinkConfig", name="dummy0", addresses=[{"address": "169.254.10.1/32"}])
    assert ("LinkConfig", "dummy0") not in documents and plan.kept == []


def test_bridge_ports_join_their_moved_bridges_links_and_keep_their_own_settings():
    interfaces = [
        {"interface": "eth3", "bridgePort": {"master": "br0"}, "mtu": 9000},
        {"interface": "br0", "bridge": {"interfaces": ["eth1"]}, "addresses": ["10.6.0.2/24"]},
        {"interface": "bond0", "bond": {"interfaces": ["eth4", "eth5"], "mode": "802.3ad"}, "bridgePort": {"master": "br0"}},
        {"interface": "eth1", "bridgePort": {"master": "br0"}},
    ]
    plan, documents = migrated(config({"network": {"interfaces": interfaces}}))
    # The bridge's own interfaces first, then its ports in the config's order, each once.
    assert documents[("BridgeConfig", "br0")]["links"] == ["eth1", "eth3", "bond0"]
    assert documents[("LinkConfig", "eth3")] == doc("LinkConfig", name="eth3", mtu=9000)
    assert documents[("BondConfig", "bond0")]["links"] == ["eth4", "eth5"]
    assert plan.kept == [] and "network" not in documents[("v1alpha1", None)]["machine"]


def test_a_bridge_port_stays_with_a_bridge_that_stays():
    interfaces = [{"interface": "br0", "bridge": {"interfaces": [], "stp": {"forwardDelay": 4}}},
                  {"interface": "eth3", "bridgePort": {"master": "br0"}}]
    plan, documents = migrated(config({"network": {"interfaces": interfaces}, "env": {"A": "b"}}))
    assert documents[("v1alpha1", None)]["machine"]["network"]["interfaces"] == interfaces
    assert [entry.split(":")[0] for entry in plan.kept] == [".machine.network.interfaces.br0", ".machine.network.interfaces.eth3"]


def test_a_dhcpv6_duid_moves_to_duid_raw_and_an_unused_one_is_dropped():
    interfaces = [{"interface": "eth0", "dhcp": True, "dhcpOptions": {"ipv6": True, "duidv6": "000100011A2B3C4D5E6F"},
                   "vlans": [{"vlanId": 5, "dhcp": True, "dhcpOptions": {"duidv6": "0003000102030405"}}]}]
    plan, documents = migrated(config({"network": {"interfaces": interfaces}}))
    assert documents[("DHCPv6Config", "eth0")] == doc("DHCPv6Config", name="eth0", clientIdentifier="duid",
                                                      duidRaw="00:01:00:01:1a:2b:3c:4d:5e:6f")
    # DHCPv4 never sent the DUID in v1alpha1.
    assert documents[("DHCPv4Config", "eth0")] == doc("DHCPv4Config", name="eth0", clientIdentifier="none")
    assert ("DHCPv6Config", "eth0.5") not in documents
    assert plan.dropped == [".machine.network.interfaces.eth0.vlans.5.dhcpOptions.duidv6: Talos runs no DHCPv6 on the link, "
                            "so it sends no DUID"]


@pytest.mark.parametrize("interface,existing,field", [
    ({"interface": "bond0", "bond": {"interfaces": ["eth1"], "mode": "802.3ad"}},
     doc("BondConfig", name="bond0", links=["eth1"], bondMode="active-backup"), "bondMode"),
    ({"interface": "wg0", "wireguard": {"privateKey": WG_PRIVATE}}, doc("WireguardConfig", name="wg0", privateKey=WG_PEER), "privateKey"),
    ({"interface": "dummy0", "dummy": True, "mtu": 1500}, doc("DummyLinkConfig", name="dummy0", mtu=9000), "mtu"),
    ({"interface": "eth0", "dhcp": True, "dhcpOptions": {"ipv4": False, "ipv6": True, "duidv6": "0003000102030405"}},
     doc("DHCPv6Config", name="eth0", clientIdentifier="mac"), "clientIdentifier"),
])
def test_a_moved_link_conflicts_with_its_document_set_otherwise_and_merges_with_an_equal_one(interface, existing, field):
    plan = migration.plan(config({"network": {"interfaces": [interface]}}, {}, "worker", existing))
    assert len(plan.conflicts) == 1 and " %s in its %s/%s document to another value" % (field, existing["kind"], existing["name"]) in plan.conflicts[0]
    equal = migrated(config({"network": {"interfaces": [interface]}}))[1][(existing["kind"], existing["name"])]
    equal_plan, documents = migrated(config({"network": {"interfaces": [interface]}}, {}, "worker", equal))
    assert documents[(existing["kind"], existing["name"])] == equal and equal_plan.warnings == []
