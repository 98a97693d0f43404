#!/usr/bin/env python3
"""stalls.py -- the warp-stall samples of one kernel from Nsight Compute's source page, summed:
by stall reason, and the SASS lines with the most samples (with their top three reasons).

    ncu --import rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python3 dev/cuda/stalls.py rep.csv [--top 40] [--range 0x1a00:0x2f00]

--range sums only the lines whose address (its low 20 bits, hex) lies in [lo, hi): a loop's body, say,
read off the listing this prints. --by-op adds the samples summed by opcode (the SASS mnemonic without
predicate and modifiers: HGMMA, MUFU, FMNMX, ...) with each opcode's top three reasons. --loop keeps
only the lines executed as often (within 5%) as the MUFU.EX2 line with the most samples: the
forward's key loop, once per key block. Samples are per warp: a producer warp idling on its mbarriers
counts as much as a consumer, so read a region's share against the consumer code's total.
"""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--range", default="")
    ap.add_argument("--by-op", action="store_true")
    ap.add_argument("--loop", action="store_true")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    hdr = rows[1]  # rows[0] names the kernel
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    lo, hi = (int(x, 16) for x in args.range.split(":")) if args.range else (0, 1 << 20)
    body = [r for r in rows[2:] if len(r) >= len(hdr) and r[ix["Address"]]]
    samples = lambda r: int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
    executed = lambda r: int(r[ix["Instructions Executed"]] or 0)
    per_step = 0
    if args.loop:
        ex2 = [r for r in body if "MUFU.EX2" in r[ix["Source"]]]
        if not ex2:
            raise SystemExit("--loop: no MUFU.EX2 line in this kernel")
        per_step = executed(max(ex2, key=samples))
        print(f"--loop: lines executed {per_step} times (+-5%)")
    total, by_reason, lines = 0, collections.Counter(), []
    for r in body:
        addr = int(r[ix["Address"]], 16) & 0xFFFFF
        if not lo <= addr < hi:
            continue
        if args.loop and abs(executed(r) - per_step) > 0.05 * per_step:
            continue
        n = samples(r)
        why = {h[6:]: int(r[ix[h]] or 0) for h in reasons}
        total += n
        by_reason.update(why)
        lines.append((n, addr, r[ix["Source"]].strip(), why))
    print(f"{rows[0][1][:100] if len(rows[0]) > 1 else rows[0][0]}: {total} samples")
    for h, v in by_reason.most_common(12):
        print(f"  {h:22s} {v:8d} {100 * v / max(total, 1):5.1f}%")
    if args.by_op:
        ops = collections.defaultdict(lambda: [0, 0, collections.Counter()])  # samples, lines, reasons
        for n, addr, src, why in lines:
            words = [w for w in src.split() if not w.startswith("@")]
            op = ops[words[0].split(".")[0] if words else "?"]
            op[0] += n
            op[1] += 1
            op[2].update(why)
        print("  by opcode (samples, share, SASS lines, top reasons):")
        for name, (n, k, why) in sorted(ops.items(), key=lambda x: -x[1][0])[:24]:
            top = " ".join(f"{h}={v}" for h, v in why.most_common(3) if v)
            print(f"  {name:12s} {n:8d} {100 * n / max(total, 1):5.1f}%  {k:5d}  {top}")
    for n, addr, src, why in sorted(lines, reverse=True)[:args.top]:
        top = " ".join(f"{k}={v}" for k, v in sorted(why.items(), key=lambda x: -x[1])[:3] if v)
        print(f"{n:7d} {100 * n / max(total, 1):5.1f}%  {addr:05x}  {src[:64]:64s} {top}")


if __name__ == "__main__":
    main()
