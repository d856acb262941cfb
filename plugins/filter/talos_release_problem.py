# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
name: talos_release_problem
short_description: Why a value cannot be the Talos version nodes are upgraded to
version_added: 1.0.0
description:
  - Checks a target Talos version (or the tag of an installer image) as M(talos_linux.talos.talos_upgrade) checks its
    O(talos_linux.talos.talos_upgrade#module:version) and O(talos_linux.talos.talos_upgrade#module:installer_image) - a release
    of a Talos minor release the collection supports (v1.9 to v1.14, any patch or pre-release of them, newer patches
    included).
  - Returns an empty string when the value is such a release, else one sentence that names the value and why it is
    refused (V(latest) is no release; V(v1.99.0) lies beyond the supported releases), for a play to stop with before
    any node is asked to pull an installer. The P(talos_linux.talos.upgrade#role) role checks its target with it.
author:
  - Talos Linux Ansible collection maintainers (@talos-linux-ansible)
positional: name, image
options:
  _input:
    description: The version (V(v1.14.1), V(1.14.1)), or with O(image=true) the installer image reference.
    type: str
    required: true
  name:
    description: How the sentence names the value, usually the variable that holds it.
    type: str
    default: version
  image:
    description: The value is an installer image reference; its tag is checked.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Stop before anything changes when the target is no supported Talos release
  vars:
    version_problem: "{{ target_version | talos_linux.talos.talos_release_problem('target_version') }}"
  ansible.builtin.fail:
    msg: "{{ version_problem }}"
  when: version_problem | length > 0

- name: The same for an installer image's tag
  ansible.builtin.assert:
    that: installer | talos_linux.talos.talos_release_problem('installer', true) == ''
    fail_msg: "{{ installer | talos_linux.talos.talos_release_problem('installer', true) }}"
"""

RETURN = r"""
_value:
  description: Empty when the value is a supported Talos release, else the sentence that says why it is not one.
  type: str
  sample: "version 'v1.99.0' is not a Talos release this collection supports (v1.9 to v1.14, any patch release of them): ..."
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.talos_linux.talos.plugins.module_utils.common.errors import TalosConfigError
from ansible_collections.talos_linux.talos.plugins.module_utils.images.installer import resolve_target


def talos_release_problem(value, name="version", image=False):
    if value is None or isinstance(value, (dict, list)):
        raise AnsibleFilterError("talos_release_problem takes a version or an image reference as text.")
    value = to_text(value)
    try:
        if image and value:
            resolve_target(image=value, image_option=name)
        else:
            resolve_target(version=value, version_option=name)
    except TalosConfigError as problem:
        return problem.message
    return ""


class FilterModule(object):

    def filters(self):
        return {"talos_release_problem": talos_release_problem}
