#!/usr/bin/env python3
"""Heap by allocation site from a dhat profile (make heap-profile).

usage: dhat_top.py PROFILE.json [eb|gb] [N]
  eb: bytes live at the profile's end (the queued waiters' steady state; the default)
  gb: bytes live at the global peak (their arrival)
Sites are named by their first three frames outside the allocator and the standard library.
"""
import collections
import json
import re
import sys

SKIP = re.compile(
    r"dhat::|^alloc::|^core::|^std::|__rust|^<alloc|^<core|^hashbrown|^<std|RawVec|raw_vec"
    r"|^<hashbrown|^bytes::|^<bytes|^<T as"
)


def main():
    profile = json.load(open(sys.argv[1]))
    field = sys.argv[2] if len(sys.argv) > 2 else "eb"
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    blocks = field + "k"
    frames = profile["ftbl"]
    total = sum(p[field] for p in profile["pps"])
    count = sum(p[blocks] for p in profile["pps"])
    print(f"{field}: {total / 1024:.1f} KiB in {count} blocks")
    size, n = collections.Counter(), collections.Counter()
    for p in profile["pps"]:
        if not p[field]:
            continue
        names = [frames[i].split(": ", 1)[-1].split(" (")[0] for i in p["fs"]]
        names = [x for x in names if not SKIP.search(x)]
        site = " <- ".join(x[:70] for x in names[:3])
        size[site] += p[field]
        n[site] += p[blocks]
    for site, b in size.most_common(top):
        print(f"{b / 1024:9.1f} KiB {n[site]:6d} blk {b / max(n[site], 1):7.0f} B/blk  {site}")


if __name__ == "__main__":
    main()
