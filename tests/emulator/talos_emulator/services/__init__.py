# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""machined's API services, one module per RPC group, each bound to one node."""

from .cluster import ClusterService
from .cosi import CosiStateService
from .image import ImageService
from .inspect import InspectService
from .lifecycle import LifecycleService
from .machine import MachineService
from .monitoring import TimeService
from .storage import StorageService


def machined_handlers(node):
    """gRPC path -> grpclib Handler for every API the node serves."""
    handlers = {}
    services = (MachineService(node), StorageService(node), LifecycleService(node), ImageService(node), CosiStateService(node),
                ClusterService(node), InspectService(node), TimeService(node))
    for service in services:
        handlers.update(service.__mapping__())
    return handlers
