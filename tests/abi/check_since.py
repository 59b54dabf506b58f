#!/usr/bin/env python3
"""Every public declaration in include/tandem/ says since which version it
exists: the comment right above it (or above the group of declarations it
belongs to) holds "Since X.Y." (the convention: tandem/export.h).
   check_since.py DIRECTORY|HEADER..."""
import glob
import os
import re
import sys

DECLARATION = re.compile(r'^(TD_API |typedef (struct|enum) td_\w+( td_\w+;| \{)|typedef \w[\w ]*\(\*td_\w+\))')
SINCE = re.compile(r'Since \d+\.\d+\.')


def missing_notes(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    missing = []
    for number, line in enumerate(lines):
        if not DECLARATION.match(line):
            continue
        above = number - 1
        # A declaration right under another (its group) shares that one's comment.
        while above >= 0 and (lines[above].startswith('TD_API') or lines[above].startswith(' ') and
                              not lines[above].rstrip().endswith('*/') or lines[above].startswith('typedef') and
                              lines[above].rstrip().endswith(';')):
            above -= 1
        if above < 0 or not lines[above].rstrip().endswith('*/'):
            missing.append((number + 1, line))
            continue
        start = above
        while start > 0 and '/*' not in lines[start]:
            start -= 1
        if not SINCE.search('\n'.join(lines[start:above + 1])):
            missing.append((number + 1, line))
    return missing


headers = []
for argument in sys.argv[1:]:
    headers += sorted(glob.glob(os.path.join(argument, '*.h'))) if os.path.isdir(argument) else [argument]
if not headers:
    sys.exit('check_since.py: no headers in %s' % ' '.join(sys.argv[1:]))
status = 0
for header in headers:
    for number, line in missing_notes(header):
        print('%s:%d: no "Since X.Y." note in the comment above: %s' % (header, number, line.strip()))
        status = 1
if status:
    print('Each public function, type and struct ends its comment with the version it first appeared in,'
          ' e.g. " * Since 0.1. */" (see tandem/export.h).')
sys.exit(status)
