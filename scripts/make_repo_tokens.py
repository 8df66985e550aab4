#!/usr/bin/env python3
"""Writes a token file of the repository's own text, deterministically: bytes as token ids (0..255).

The text is README.md, then docs/*.md, then the C++ sources (*.hpp, *.cpp) that git tracks, each group in
path order, concatenated until --tokens bytes; the file is llm.c's .bin (a header of 256 int32: magic
20240520, version 1, token count; then uint16 tokens), which `actorpipe train --data` and
bench/libtorch_gpt2.cpp both read. The same commit gives the same file, byte for byte.

  scripts/make_repo_tokens.py --output repo_tokens.bin --tokens 1000000
"""
import argparse
import array
import os
import struct
import subprocess
import sys


def repository_text(root):
    tracked = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                             text=True).stdout.split("\n")
    tracked = sorted(p for p in tracked if p)
    groups = [["README.md"], [p for p in tracked if p.startswith("docs/") and p.endswith(".md")],
              [p for p in tracked if p.endswith((".hpp", ".cpp"))]]
    for group in groups:
        for path in group:
            with open(os.path.join(root, path), "rb") as f:
                yield f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="the token file to write (llm.c .bin)")
    parser.add_argument("--tokens", type=int, default=1000000, help="how many tokens (bytes of text)")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="the repository (default: this script's)")
    args = parser.parse_args()
    if args.tokens <= 0:
        sys.exit("make_repo_tokens: --tokens must be positive, got %d" % args.tokens)
    text = bytearray()
    for chunk in repository_text(args.root):
        text += chunk
        if len(text) >= args.tokens:
            break
    if len(text) < args.tokens:
        sys.exit("make_repo_tokens: the repository has %d bytes of text, fewer than --tokens %d" %
                 (len(text), args.tokens))
    tokens = array.array("H", list(text[:args.tokens]))  # one uint16 per byte
    if sys.byteorder != "little":
        tokens.byteswap()
    header = struct.pack("<256i", 20240520, 1, args.tokens, *([0] * 253))
    temporary = args.output + ".tmp"
    with open(temporary, "wb") as f:
        f.write(header)
        tokens.tofile(f)
    os.replace(temporary, args.output)
    print('{"tokens":%d,"output":"%s"}' % (args.tokens, args.output))


if __name__ == "__main__":
    main()
