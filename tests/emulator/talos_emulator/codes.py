# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gRPC status names as Go prints them (``PermissionDenied``) and grpclib's Status enum."""

from grpclib.const import Status


def status_name(status):
    """``Status.PERMISSION_DENIED`` -> ``"PermissionDenied"``."""
    return "".join(part.capitalize() for part in status.name.split("_"))


def status_from_name(name):
    """``"PermissionDenied"``, ``"PERMISSION_DENIED"`` or a Status -> the Status."""
    if isinstance(name, Status):
        return name
    if "_" in name or name.isupper():
        return Status[name.upper()]
    return Status["".join("_" + char if char.isupper() and index else char for index, char in enumerate(name)).upper()]
