# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ansible-test ignore file of every supported ansible-core line, written from the one list.

``tests/sanity/ignore.txt`` is the one list of sanity ignores. ansible-test reads only
``tests/sanity/ignore-<line>.txt`` of the line it runs, with globs expanded and the tests it runs
per Python version (compile, import) named for each Python (``import-3.12``). The files of every
line are committed, so that ``ansible-test sanity`` on the built collection (as Galaxy's importer
and partners run it) finds them; ``tests/unit/test_sanity_ignores.py`` keeps them in step.

    python tests/sanity/ignores.py           write every line's file
    python tests/sanity/ignores.py 2.22      write one line's file (a line not in LINES yet: the
                                             Pythons of the newest line are assumed)
"""

import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ONE_LIST = os.path.join("tests", "sanity", "ignore.txt")

# The Pythons each ansible-core line's ansible-test knows, from 3.10 (tests/config.yml:
# the modules run on Python 3.10 and later).
LINES = {
    "2.16": ("3.10", "3.11", "3.12"),
    "2.17": ("3.10", "3.11", "3.12"),
    "2.18": ("3.10", "3.11", "3.12", "3.13"),
    "2.19": ("3.10", "3.11", "3.12", "3.13"),
    "2.20": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "2.21": ("3.10", "3.11", "3.12", "3.13", "3.14"),
}
PER_PYTHON_VERSION = ("compile", "import")


def path_of(line):
    return os.path.join("tests", "sanity", "ignore-%s.txt" % line)


def entries(line, root=ROOT):
    """The lines of ``line``'s ignore file: each entry of the one list, per matching path and Python."""
    pythons = LINES.get(line) or LINES[max(LINES, key=lambda name: tuple(int(part) for part in name.split(".")))]
    result = []
    with open(os.path.join(root, ONE_LIST)) as source:
        for text in source:
            text = text.split("#", 1)[0].strip()
            if not text:
                continue
            pattern, rule = text.split()
            test, _sep, action = rule.partition("!")
            rules = ["%s-%s!%s" % (test, python, action) for python in pythons] if test in PER_PYTHON_VERSION else [rule]
            paths = sorted(os.path.relpath(path, root) for path in glob.glob(os.path.join(root, pattern), recursive=True))
            if not paths:
                raise ValueError("%s: %s matches no file; remove the entry" % (ONE_LIST, pattern))
            result += ["%s %s" % (path, each) for path in paths for each in rules]
    return result


def write(line, root=ROOT):
    with open(os.path.join(root, path_of(line)), "w") as ignores:
        ignores.write("".join(entry + "\n" for entry in entries(line, root)))


def main(argv):
    for line in argv or sorted(LINES):
        write(line)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError as error:
        sys.exit(str(error))
