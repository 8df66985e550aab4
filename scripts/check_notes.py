#!/usr/bin/env python3
"""Checks the design Notes of the repository: each defined once, each reference naming a definition.

A Note is defined by a comment whose text starts with the word Note, the name in square brackets and a
colon (after //, # or *, also at the end of a line of code). Every other occurrence of the word Note
followed by a bracketed name, in code or in the Markdown docs, is a reference. Markdown files hold
references only. A name may wrap onto the next comment line.

Usage: check_notes.py [repository root]   (default: the current directory)
Exit 0 with a one-line summary; exit 1 listing file:line and the name of each problem.
"""
import collections
import os
import re
import subprocess
import sys

NOTE_START = re.compile(r'Note \[')
NAME_END = re.compile(r'([^\]]*)\](:)?')
# What starts a comment's continuation line, taken off when a name wraps onto it.
CONTINUATION = re.compile(r'^\s*(//+!?|#+|\*+(?!/))?\s*')
# The comment's text starts right before the Note: after //, /*, # or a block comment's leading *.
COMMENT_START = re.compile(r'(//+!?|/\*+|#+|^\s*\*+)\s*$')
TEXT_SUFFIXES = ('.cpp', '.hpp', '.h', '.c', '.cc', '.sh', '.py', '.cmake', '.txt', '.md', '.supp', '.in',
                 '.yml', '.yaml', '.toml', '.cfg')
SKIP_DIRS = ('.git', 'third_party')


def tracked_files(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-z'], check=True, capture_output=True).stdout
        files = [f for f in out.decode().split('\0') if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith('build') and x not in SKIP_DIRS]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    this = os.path.relpath(os.path.abspath(__file__), os.path.abspath(root))
    return sorted(f for f in files
                  if f.endswith(TEXT_SUFFIXES) and f != this
                  and not any(part in SKIP_DIRS for part in f.split('/')))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    defs = collections.defaultdict(list)
    refs = collections.defaultdict(list)
    problems = []
    files = tracked_files(root)
    for path in files:
        try:
            with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
                lines = f.read().split('\n')
        except OSError:
            continue  # listed by git but absent from the work tree
        markdown = path.endswith('.md')
        for number, line in enumerate(lines, 1):
            for m in NOTE_START.finditer(line):
                # A name may wrap onto the next comment line: join it, without the comment's marker.
                rest = line[m.end():]
                for following in lines[number:number + 2]:
                    if ']' in rest:
                        break
                    rest += ' ' + CONTINUATION.sub('', following)
                where = f'{path}:{number}'
                closed = NAME_END.match(rest)
                if not closed:
                    problems.append(f'{where}: a Note name that does not close: "{rest[:40]}"')
                    continue
                name = ' '.join(closed.group(1).split())
                if not name:
                    problems.append(f'{where}: a Note with an empty name')
                    continue
                definition = (not markdown and closed.group(2)
                              and COMMENT_START.search(line[:m.start()]) is not None)
                (defs if definition else refs)[name].append(where)
    for name, places in sorted(defs.items()):
        if len(places) > 1:
            for where in places[1:]:
                problems.append(f'{where}: Note [{name}] defined again (first at {places[0]})')
    for name, places in sorted(refs.items()):
        if name not in defs:
            for where in places:
                problems.append(f'{where}: Note [{name}] is referenced but defined nowhere')
    if problems:
        for p in problems:
            print(p)
        print(f'check_notes: {len(problems)} problem(s) in {len(files)} files', file=sys.stderr)
        return 1
    print(f'check_notes: {len(defs)} Notes defined once each, '
          f'{sum(len(v) for v in refs.values())} references to them, in {len(files)} files')
    return 0


if __name__ == '__main__':
    sys.exit(main())
