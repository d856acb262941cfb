# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An emulated Talos cluster speaking the Talos gRPC API, for the collection's tests and demo."""

from .control import EmulatedCluster

__all__ = ["EmulatedCluster"]
