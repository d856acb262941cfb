# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local Image Factory for the tests (see server.py)."""

from .server import ImageFactoryServer, write_tls_files  # noqa: F401
