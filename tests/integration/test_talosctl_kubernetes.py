# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A user's own talosctl against the demo's cluster with the Kubernetes switch on: a real kube-apiserver on the control
planes' etcd and the nodes as its kubelets (the tests: talosctl_judge.py)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

# pytest runs the tests imported here, in this order, on this module's cluster (the CA rotation runs once, without
# Kubernetes: test_talosctl.py).
# pylint: disable=unused-import
from talosctl_judge import (  # noqa: F401
    demo,
    run,
    support_bundles,
    test_everyday_reads_answer_as_talos_does,
    test_get_reads_every_type_the_collection_and_support_read,
    test_events_are_xids_and_tail_counts_back,
    test_etcd_commands_and_snapshot_match_the_collection,
    test_health_matches_talos_health,
    test_support_bundle_holds_what_talos_support_bundle_holds,
    test_rotate_ca_dry_run_reads_the_os_ca,
    test_upgrade_k8s_dry_run_plans_what_talos_kubernetes_upgrade_plans,
    test_node_names_resolve_as_the_config_says,
)

# A judge of the emulator and of the collection's answers: the doors and library versions change nothing here.
pytestmark = [pytest.mark.once, pytest.mark.long]


@pytest.fixture(scope="module")
def kubernetes():
    return True
