# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The smallest patches between two machine configs: what they say, that apply_patches makes one config the other
with them, document order, and what several nodes' patches share."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import copy

import pytest

from ansible_collections.talos_linux.talos.plugins.module_utils.config import smallest_patch as sp
from ansible_collections.talos_linux.talos.plugins.module_utils.config.machine_config import apply_patches


def v1alpha1(**machine):
    document = {"version": "v1alpha1", "debug": False, "persist": True,
                "machine": {"type": "worker", "certSANs": [], "kubelet": {"image": "ghcr.io/siderolabs/kubelet:v1.36.3"},
                            "install": {"disk": "/dev/sda", "wipe": False}},
                "cluster": {"controlPlane": {"endpoint": "https://cp.example:6443"}, "discovery": {"enabled": True}}}
    document["machine"].update(machine)
    return document


def doc(kind, name=None, **fields):
    document = {"apiVersion": "v1alpha1", "kind": kind}
    if name:
        document["name"] = name
    document.update(fields)
    return document


BASE = [v1alpha1(), doc("HostnameConfig", auto="stable"),
        doc("KubeletConfig", image="ghcr.io/siderolabs/kubelet:v1.37.0", config={}), doc("KubePrismConfig", port=7445)]


def roundtrip(base, target):
    patches = sp.smallest_patches(base, target)
    assert apply_patches(base, patches) == target, patches
    assert sp.differences(apply_patches(base, patches), target) == []
    return patches


def test_equal_configs_need_no_patch():
    assert sp.smallest_patches(BASE, copy.deepcopy(BASE)) == []


def test_a_changed_field_is_the_one_field():
    target = copy.deepcopy(BASE)
    target[0]["machine"]["kubelet"]["extraArgs"] = {"rotate-server-certificates": "true"}
    target[0]["machine"]["install"]["disk"] = "/dev/nvme0n1"
    assert roundtrip(BASE, target) == [
        {"machine": {"kubelet": {"extraArgs": {"rotate-server-certificates": "true"}}, "install": {"disk": "/dev/nvme0n1"}}}]


def test_a_field_the_target_lacks_is_removed_with_null():
    target = copy.deepcopy(BASE)
    del target[0]["cluster"]["discovery"]
    del target[2]["config"]
    assert roundtrip(BASE, target) == [
        {"cluster": {"discovery": None}},
        {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "config": None}]


def test_a_list_that_differs_is_given_whole():
    base = [v1alpha1(certSANs=["a.example", "b.example"])]
    target = [v1alpha1(certSANs=["a.example", "c.example"])]
    assert roundtrip(base, target) == [{"machine": {"certSANs": ["a.example", "c.example"]}}]


def test_an_empty_value_is_not_an_absent_one():
    # Talos compares configs as text: an empty list present on one side only is a difference.
    base = [v1alpha1()]
    target = copy.deepcopy(base)
    del target[0]["machine"]["certSANs"]
    target[0]["machine"]["network"] = {}
    assert roundtrip(base, target) == [{"machine": {"certSANs": None, "network": {}}}]


def test_documents_the_target_lacks_are_deleted_and_new_ones_appended():
    target = [BASE[0], BASE[1], BASE[3], doc("LinkConfig", "eth0", addresses=[{"address": "10.5.0.2/24"}])]
    assert roundtrip(BASE, target) == [
        {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "$patch": "delete"},
        doc("LinkConfig", "eth0", addresses=[{"address": "10.5.0.2/24"}])]


def test_named_documents_are_told_apart_by_name():
    base = [v1alpha1(), doc("LinkConfig", "eth0", mtu=1500), doc("LinkConfig", "eth1", mtu=1500)]
    target = [v1alpha1(), doc("LinkConfig", "eth0", mtu=1500), doc("LinkConfig", "eth1", mtu=9000)]
    assert roundtrip(base, target) == [{"apiVersion": "v1alpha1", "kind": "LinkConfig", "name": "eth1", "mtu": 9000}]


def test_a_document_out_of_order_is_removed_and_appended_again():
    # Patches only append documents: what the target lists after a new document must come after it.
    target = [BASE[0], BASE[1], doc("ExtensionServiceConfig", "nut", environment=["A=1"]), BASE[2], BASE[3]]
    patches = roundtrip(BASE, target)
    assert patches == [
        {"apiVersion": "v1alpha1", "kind": "KubeletConfig", "$patch": "delete"},
        {"apiVersion": "v1alpha1", "kind": "KubePrismConfig", "$patch": "delete"},
        target[2], target[3], target[4]]


def test_patches_are_copies():
    target = copy.deepcopy(BASE) + [doc("SysctlConfig", params={"a": "1"})]
    patches = sp.smallest_patches(BASE, target)
    patches[-1]["params"]["a"] = "2"
    assert target[-1]["params"] == {"a": "1"}


def test_patch_size_counts_what_is_set():
    assert sp.patch_size([]) == 0
    assert sp.patch_size([{"machine": {"env": {"A": "1", "B": "2"}, "certSANs": ["x", "y"]}}]) == 4
    assert sp.patch_size([{"apiVersion": "v1alpha1", "kind": "KubeletConfig", "$patch": "delete"}]) == 1
    assert sp.patch_size([{"cluster": {"discovery": None}}, {"machine": {"network": {}}}]) == 2


def test_common_patches_keep_what_every_node_sets_alike():
    first = [{"machine": {"env": {"A": "1"}, "network": {"hostname": "w-1"}}},
             doc("ExtensionServiceConfig", "nut", environment=["A=1"]), doc("LinkConfig", "eth0", mtu=9000)]
    second = [{"machine": {"env": {"A": "1"}, "network": {"hostname": "w-2"}}},
              doc("ExtensionServiceConfig", "nut", environment=["A=1"]), doc("LinkConfig", "eth0", mtu=1500)]
    assert sp.common_patches([first, second], BASE) == [
        {"machine": {"env": {"A": "1"}}}, doc("ExtensionServiceConfig", "nut", environment=["A=1"])]


def test_common_patches_never_split_an_added_document():
    first = [doc("LinkConfig", "eth0", addresses=[{"address": "10.5.0.2/24"}], routes=[{"gateway": "10.5.0.1"}])]
    second = [doc("LinkConfig", "eth0", addresses=[{"address": "10.5.0.3/24"}], routes=[{"gateway": "10.5.0.1"}])]
    assert sp.common_patches([first, second], BASE) == []
    # A document both configs have is patched alike where the nodes agree.
    first = [{"apiVersion": "v1alpha1", "kind": "KubeletConfig", "extraArgs": {"a": "1"}, "image": "x"}]
    second = [{"apiVersion": "v1alpha1", "kind": "KubeletConfig", "extraArgs": {"a": "1"}, "image": "y"}]
    assert sp.common_patches([first, second], BASE) == [{"apiVersion": "v1alpha1", "kind": "KubeletConfig", "extraArgs": {"a": "1"}}]


def test_common_removals_are_shared_and_lone_ones_are_not():
    removal = {"apiVersion": "v1alpha1", "kind": "KubePrismConfig", "$patch": "delete"}
    assert sp.common_patches([[removal], [dict(removal)]], BASE) == [removal]
    assert sp.common_patches([[removal], []], BASE) == []
    assert sp.common_patches([], BASE) == []


def test_differences_name_what_a_patch_cannot_set():
    # A merge patch cannot set null: a target that holds one stays different, and says where.
    target = copy.deepcopy(BASE)
    target[0]["machine"]["network"] = None
    result = apply_patches(BASE, sp.smallest_patches(BASE, target))
    assert sp.differences(result, target) == ["v1alpha1.machine.network"]
    assert sp.differences(BASE, BASE[:1]) == ["HostnameConfig", "KubePrismConfig", "KubeletConfig"]
    assert sp.differences(BASE, [BASE[0], BASE[2], BASE[1], BASE[3]]) == ["document order"]


@pytest.mark.parametrize("kind", ["scalar to mapping", "mapping to list"])
def test_a_change_of_type_is_given_whole(kind):
    base = [v1alpha1(network="dhcp" if kind == "scalar to mapping" else {"hostname": "a"})]
    target = [v1alpha1(network={"hostname": "a"} if kind == "scalar to mapping" else ["a"])]
    assert roundtrip(base, target) == [{"machine": {"network": target[0]["machine"]["network"]}}]
