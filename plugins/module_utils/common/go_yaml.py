# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""YAML the way Talos reads and writes it (Go ``yaml.v3``, written with an indent of four).

Reading (``load``, ``load_all``): PyYAML's safe loader, on libyaml when PyYAML
has it (a machine config parses ten times faster), with timestamps left as
strings as Go's decoder leaves them.

Talos tools write machine configs, secrets bundles and talosconfigs with Go's
encoder. PyYAML's dumper differs in ways a byte comparison notices (sequences
not indented under their key, other quoting), so generated files are written
here instead: mappings keep their key order, sequences are indented under
their key, multi-line strings become literal blocks, and a string is quoted
only when it would otherwise read back as something else.

Comments (``talosctl gen config --with-docs --with-examples``) are optional
``Comments``: lines above a mapping key and lines after a mapping's last key,
addressed by key path; they never change what the text parses to.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import io
from collections import namedtuple

try:
    import yaml
    from yaml.emitter import Emitter
    from yaml.nodes import ScalarNode
    from yaml.resolver import Resolver
except ImportError:  # reported by the module through missing_required_lib
    yaml = Emitter = ScalarNode = Resolver = None

INDENT = 4
DOCUMENT_SEPARATOR = "---\n"

# ``above``: {key path: lines} written above that key; ``after``: {path of a block mapping: lines}
# written after its last key. A key path is the tuple of mapping keys from the document's root,
# ``()`` being the document itself; keys inside sequences take no comments.
Comments = namedtuple("Comments", "above after")


class Loader(getattr(yaml, "CSafeLoader", None) or getattr(yaml, "SafeLoader", object)):
    """The safe loader (libyaml's when PyYAML has it) without timestamps: Go reads them as strings."""


if yaml is not None:
    Loader.yaml_implicit_resolvers = dict(
        (first, [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"])
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items())


def load(text):
    """The one YAML document of ``text`` (None when empty); raises yaml.YAMLError."""
    return yaml.load(text, Loader=Loader)


def load_all(text):
    """Every document of the YAML stream ``text``, empty ones as None; raises yaml.YAMLError."""
    return list(yaml.load_all(text, Loader=Loader))


def dump_documents(documents, comments=None):
    """A YAML stream of ``documents`` joined by ``---`` (no leading separator), as Talos writes configs.

    ``comments``, when given, is called with each document and returns its ``Comments`` (or None).
    """
    return DOCUMENT_SEPARATOR.join(dump(document, comments(document) if comments else None) for document in documents)


def dump(document, comments=None):
    """One YAML document (a mapping) as text ending in a newline, with the optional ``Comments``."""
    if not isinstance(document, dict):
        raise TypeError("a YAML document here is a mapping, not %s" % type(document).__name__)
    lines = []
    if comments:
        _comment(comments.above.get(()), 0, lines)
    if not document:
        lines.append("{}")
    else:
        _mapping(document, 0, INDENT, lines, path=(), comments=comments)
    return "\n".join(lines) + "\n"


def _comment(texts, indent, lines):
    for text in texts or ():
        lines.append(" " * indent + ("# " + text if text else "#"))


def _mapping(mapping, key_indent, child_indent, lines, first_prefix=None, path=None, comments=None):
    """Emit ``mapping``; its keys at ``key_indent``, nested blocks at ``child_indent``.

    ``first_prefix`` replaces the indentation of the first key (``"- "`` of a
    sequence item that is a mapping). ``path`` is the mapping's key path when it takes ``comments``.
    """
    commented = comments is not None and path is not None
    for position, (key, value) in enumerate(mapping.items()):
        key_path = path + (key,) if commented else None
        if commented:
            _comment(comments.above.get(key_path), key_indent, lines)
        prefix = first_prefix if position == 0 and first_prefix is not None else " " * key_indent
        head = prefix + _scalar(str(key) if not isinstance(key, str) else key) + ":"
        _value(head, value, child_indent, lines, key_path, comments)
    if commented:
        _comment(comments.after.get(path), key_indent, lines)


def _value(head, value, child_indent, lines, path=None, comments=None):
    if isinstance(value, dict) and value:
        lines.append(head)
        _mapping(value, child_indent, child_indent + INDENT, lines, path=path, comments=comments)
    elif isinstance(value, list) and value:
        lines.append(head)
        _sequence(value, child_indent, lines)
    elif isinstance(value, str) and _fits_literal(value):
        _literal(head, value, child_indent, lines)
    else:
        lines.append(head + " " + _scalar(value))


def _sequence(items, dash_indent, lines):
    for item in items:
        prefix = " " * dash_indent + "- "
        if isinstance(item, dict) and item:
            _mapping(item, dash_indent + 2, dash_indent + INDENT, lines, first_prefix=prefix)
        elif isinstance(item, list) and item:
            # "- - a": the inner sequence starts on the dash's line.
            inner = []
            _sequence(item, dash_indent + 2, inner)
            lines.append(prefix + inner[0].lstrip(" "))
            lines.extend(inner[1:])
        elif isinstance(item, str) and _fits_literal(item):
            _literal(prefix.rstrip(), item, dash_indent + 2, lines)
        else:
            lines.append(prefix + _scalar(item))


def _fits_literal(text):
    """Whether the multi-line ``text`` reads back the same from a literal block (``|``) without an indentation hint.

    A reader finds the block's indentation from its first non-blank line, so
    that line must not start with a space, nor a blank line before it hold
    spaces, and there must be one; control characters need the escapes of a
    double-quoted string.
    """
    if "\n" not in text or not all(char == "\t" or _printable(char) for char in text):
        return False
    for line in text.split("\n"):
        if line.strip(" "):
            return not line.startswith(" ")
        if line:
            return False
    return False  # only line breaks: a block would read back empty


def _literal(head, text, indent, lines):
    indicator = "|" if text.endswith("\n") and not text.endswith("\n\n") else ("|-" if not text.endswith("\n") else "|+")
    lines.append(head + " " + indicator)
    body = text[:-1] if text.endswith("\n") else text
    for line in body.split("\n"):
        lines.append(" " * indent + line if line else "")


def _scalar(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _string(value)


def _string(text):
    # A string that would read back as another type is double-quoted (Go does the same);
    # one the plain style cannot carry is single-quoted, or double-quoted when it must be.
    # A multi-line string here did not fit a literal block: only escapes keep its line breaks.
    # Characters Go's encoder cannot print (controls, tab, NEL, BOM, beyond U+FFFF) force double quotes;
    # other non-ASCII text it writes as it is.
    if "\n" in text or not all(_printable(char) for char in text) \
            or Resolver().resolve(ScalarNode, text, (True, False)) != "tag:yaml.org,2002:str":
        return _double_quoted(text)
    analysis = Emitter(io.StringIO(), allow_unicode=True).analyze_scalar(text)
    if analysis.allow_block_plain and not analysis.empty:
        return text
    if analysis.allow_single_quoted:
        return "'%s'" % text.replace("'", "''")
    return _double_quoted(text)


def _printable(char):
    """Whether Go's yaml.v3 writes ``char`` as it is (its is_printable: no tab, NEL, BOM or character past U+FFFF)."""
    code = ord(char)
    return code == 0x0A or 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xD7FF or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)


# The short escapes of Go's double-quoted style; other characters it escapes are \xXX, \uXXXX or \UXXXXXXXX.
_SHORT_ESCAPES = {
    "\0": "0", "\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r", "\x1b": "e",
    '"': '"', "\\": "\\", "\x85": "N", "\u2028": "L", "\u2029": "P",
}


def _double_quoted(text):
    out = []
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append("\\" + _SHORT_ESCAPES[char])
        elif _printable(char):
            out.append(char)
        else:
            code = ord(char)
            out.append("\\x%02X" % code if code <= 0xFF else "\\u%04X" % code if code <= 0xFFFF else "\\U%08X" % code)
    return '"%s"' % "".join(out)
