#!/usr/bin/env python3
"""The alpha-beta cost model of tandem's all-reduce across processes
(docs/SCALING.md), as a table.

  allreduce_model.py cluster [--alpha-n S] [--beta-n B/s] [--o-n S]
                             [--sleep S] [--polls K] [--devices D] ...
      predictions for P = 8, 64, 512 nodes of D devices: the hierarchical
      all-reduce as built, a flat ring over all N = P*D devices, Open MPI
      4.1.4's MPI_Allreduce over N ranks (its tuned decision table), and the
      hierarchical one with recursive halving/doubling between the nodes'
      leaders and spin-then-sleep polling (not built), and the latency
      terms of those variants.

  allreduce_model.py machine --alpha S --beta B/s --copy-cached B/s
          --add-cached B/s --copy-dram B/s --add-dram B/s --dram-speedup X
          --sleep S [--polls K] [--polls-counted P:S:K,...] [--cache BYTES]
          [--cores C] --measured FILE...
      the hierarchical all-reduce's prediction for P processes x cpu:1
      oversubscribed on C cores, from parameters measured in the same run
      (bench/allreduce_mpi --probe), beside the measured medians of
      bench/allreduce_mpi --json rows in FILE... (the simulation); with
      --polls-counted, again with the poll sleeps counted per exchange.

Every time is in seconds, every bandwidth in bytes per second. The terms
are spelled out in docs/SCALING.md; each function below names the code path
it stands for.
"""
import argparse
import json
import math
import statistics


def poll_sleeps(k, sleep):
    """What k poll sleeps of procs_mpi.c's wait_requests last: it asks
    for 1 us, doubling up to 200 us, and each sleep lasts what it asks plus
    the timer slack and the wake-up (`sleep` = what nanosleep(1 us) lasts,
    measured). A fractional k counts that share of the next sleep."""
    total, asked, i = 0.0, 1e-6, 0
    while i < k:
        total += min(1.0, k - i) * (asked - 1e-6 + sleep)
        asked = min(2 * asked, 200e-6)
        i += 1
    return total


def hierarchical_as_built(S, P, D, m):
    """ring.c + ring_procs.c: local ring reduce-scatter, deposit, one
    exchange of P-1 blocks (all posted at once), the sum over processes,
    one all-gather of P-1 blocks, every local rank copies the whole result."""
    t = 0.0
    if D > 1:
        t += (D - 1) * m["alpha_l"] + (D - 1) / D * S / m["add"]  # local reduce-scatter
    t += S / D / m["copy"]  # deposit the owned chunk into the process's copy
    for _phase in ("exchange", "all-gather"):
        # The leader posts P-1 sends and P-1 receives of S/P each at once:
        # one wire latency, P-1 message overheads, (P-1)/P*S through the
        # NIC each way, and the poll sleeps: wait_requests tests, then
        # sleeps "1 us" (which lasts the timer slack) between tests, and
        # nothing from another process is there at the first test.
        t += m["alpha_n"] + (P - 1) * m["o_n"] + (P - 1) / P * S / m["beta_n"] + poll_sleeps(m["polls"], m["sleep"])
    t += (P - 1) / P * S / D / m["add"] + S / (P * D) / m["copy"]  # sum of P rows of S/(P*D)
    t += S / m["copy"]  # place_result: every local rank copies all of S
    t += 4 * m["alpha_l"] if D > 1 else 0.0  # deposited / exchanged / final / gathered hand-offs
    return t


def flat_ring(S, N, D, m):
    """tandem's ring, were it to span every device of every node: 2(N-1)
    dependent steps of S/N each; the slowest link of a step is the
    network's (the ring enters and leaves each node once per step)."""
    if N == 1:
        return 0.0
    alpha = m["alpha_n"] if N > D else m["alpha_l"]
    beta = m["beta_n"] if N > D else m["copy"]
    return 2 * (N - 1) * (alpha + S / N / beta) + (N - 1) / N * S / m["add"]


def openmpi_algorithm(N, S):
    """Open MPI 4.1.4 coll/tuned, ompi_coll_tuned_allreduce_intra_dec_fixed,
    commutative op (MPI_SUM): 2 nonoverlapping, 3 recursive doubling,
    4 ring, 5 segmented ring, 6 Rabenseifner. Read from v4.1.4's
    coll_tuned_decision_fixed.c (only the rows used here)."""
    if N < 4:
        table = [(8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5)]
        default = 6
    elif N < 8:
        table, default = [(16, 4), (8192, 3)], 6
    elif N < 16:
        table, default = [(8192, 3)], 6
    elif N < 32:
        table, default = [(64, 5), (4096, 3)], 6
    elif N < 64:
        table, default = [(128, 5)], 6
    elif N < 128:
        table, default = [(262144, 3)], 6
    elif N < 256:
        table, default = [(131072, 2), (262144, 3)], 6
    elif N < 512:
        table, default = [(4096, 2)], 6
    elif N < 2048:
        table, default = [(2048, 2), (16384, 3)], 6
    elif N < 4096:
        table, default = [(2048, 2), (4096, 5), (16384, 3)], 6
    else:
        table, default = [(2048, 2), (16384, 5), (32768, 3)], 6
    for limit, alg in table:
        if S < limit:
            return alg
    return default


ALGORITHM_NAMES = {2: "reduce+bcast", 3: "recursive doubling", 4: "ring", 5: "segmented ring", 6: "Rabenseifner"}


def openmpi_allreduce(S, P, D, m):
    """MPI_Allreduce over N = P*D ranks, D per node, ranks numbered node by
    node (mpirun's default by-slot mapping). Returns (seconds, name)."""
    N = P * D
    alg = openmpi_algorithm(N, S)
    lp, ld = math.log2(P), math.log2(D)
    if alg == 3:
        # log2 N exchanges of all of S: the first log2 D inside the node,
        # then log2 P across it, where all D ranks of a node send at once.
        t = ld * (m["alpha_l"] + S / m["copy"] + S / m["add"])
        t += lp * (m["alpha_n"] + D * S / m["beta_n"] + S / m["add"])
    elif alg == 6:
        # Recursive halving with distance doubling, then the mirror
        # all-gather: the large early halves stay inside the node; across
        # it the node's D ranks together move (P-1)/P*S each way.
        t = 2 * (ld * m["alpha_l"] + lp * m["alpha_n"])
        t += 2 * (D - 1) / D * S / m["copy"] + 2 * (P - 1) / P * S / m["beta_n"] + (N - 1) / N * S / m["add"]
    elif alg == 2:
        # A binomial reduce then a broadcast (small messages only here).
        t = 2 * (ld * (m["alpha_l"] + S / m["copy"]) + lp * (m["alpha_n"] + S / m["beta_n"]))
    else:
        # ring / segmented ring: 2(N-1) steps, the network's latency each.
        t = flat_ring(S, N, D, m)
    return t, ALGORITHM_NAMES[alg]


def hierarchical_variant(S, P, D, m, between):
    """Not built: the hierarchical all-reduce with the exchange polled by
    spinning first (no step waits out a timer slack), and the leaders'
    two phases done `between` = "all-to-all" (as now: P-1 concurrent
    messages), "ring" (P-1 dependent steps of S/P each) or "halving"
    (recursive halving, then doubling: log2 P dependent steps, S/2 down to
    S/P). The bytes through each NIC are (P-1)/P*S per phase in all three."""
    t = hierarchical_as_built(S, P, D, m)
    t -= 2 * (m["alpha_n"] + (P - 1) * m["o_n"] + poll_sleeps(m["polls"], m["sleep"]))
    steps = {"all-to-all": None, "ring": P - 1, "halving": math.log2(P)}[between]
    if steps is None:
        return t + 2 * (m["alpha_n"] + (P - 1) * m["o_n"])
    return t + 2 * steps * (m["alpha_n"] + m["o_n"])


def size_name(S):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if S >= scale:
            return f"{S / scale:.3g} {unit}"
    return f"{S} B"


def ms(t):
    return f"{t * 1e3:.3g}"


def cluster(args):
    m = {"alpha_n": args.alpha_n, "beta_n": args.beta_n, "o_n": args.o_n, "polls": args.polls,
         "sleep": args.sleep, "alpha_l": args.alpha_l, "copy": args.copy, "add": args.add}
    D = args.devices
    print(f"D = {D} devices per node; alpha_n {args.alpha_n * 1e6:g} us, beta_n {args.beta_n / 1e9:g} GB/s, "
          f"o_n {args.o_n * 1e6:g} us per message, {args.polls:g} poll sleeps of {args.sleep * 1e6:g} us per "
          f"exchange, alpha_l {args.alpha_l * 1e6:g} us, host memcpy {args.copy / 1e9:g} GB/s, add "
          f"{args.add / 1e9:g} GB/s\n")
    print("| P nodes | N devices | S | hierarchical as built, ms | flat ring over N, ms "
          "| MPI_Allreduce over N ranks, ms (algorithm) | as built / MPI |")
    print("|---|---|---|---|---|---|---|")
    for P in args.nodes:
        for S in args.sizes:
            hier = hierarchical_as_built(S, P, D, m)
            ring = flat_ring(S, P * D, D, m)
            mpi, name = openmpi_allreduce(S, P, D, m)
            print(f"| {P} | {P * D} | {size_name(S)} | {ms(hier)} | {ms(ring)} | {ms(mpi)} ({name}) "
                  f"| {hier / mpi:.2f} |")
    print("\nLatency terms alone (S -> 0), ms:\n")
    print("| P nodes | as built | spin polling, all-to-all | spin, ring between leaders "
          "| spin, recursive halving/doubling between leaders | flat ring over N |")
    print("|---|---|---|---|---|---|")
    for P in args.nodes:
        row = [hierarchical_as_built(0, P, D, m)]
        row += [hierarchical_variant(0, P, D, m, b) for b in ("all-to-all", "ring", "halving")]
        row.append(flat_ring(0, P * D, D, m))
        print(f"| {P} | " + " | ".join(ms(t) for t in row) + " |")
    print(f"\nHierarchical with spin polling and recursive halving/doubling between leaders, ms:\n")
    print("| P nodes | " + " | ".join(size_name(S) for S in args.sizes) + " |")
    print("|---|" + "---|" * len(args.sizes))
    for P in args.nodes:
        print(f"| {P} | " + " | ".join(ms(hierarchical_variant(S, P, D, m, "halving")) for S in args.sizes) + " |")


def machine_prediction(S, P, m, polls=None):
    """The hierarchical all-reduce of P processes x cpu:1 sharing m["cores"]
    cores. Each process's own work is what hierarchical_as_built counts
    with D = 1, on the transport measured here (alpha: one message's cost,
    all of it CPU on shared memory; beta: the single-copy read of a
    message) and the host memory measured here: in the last-level cache
    while the P processes' buffers (3 S each: the device's, the process's
    copy, the received rows) fit in it, at DRAM speed otherwise. P
    processes' work shares the cores, so it is multiplied by P/cores once P
    exceeds them -- by P/speedup for DRAM traffic, where two threads get
    only `dram_speedup` times one thread's bandwidth. The poll sleeps are
    waits, not work: they are not shared out; `polls` of them per phase
    are on the critical path."""
    cached = 3 * P * S <= m["cache"]
    copy = m["copy_cached"] if cached else m["copy_dram"]
    add = m["add_cached"] if cached else m["add_dram"]
    messages = 2 * (P - 1) * m["alpha"] + 2 * (P - 1) / P * S / m["beta"]  # exchange and all-gather
    memory = (2 * S + S / P) / copy + (P - 1) / P * S / add  # deposit, own row, place; the sum
    cpu_share = max(1.0, P / m["cores"])
    memory_share = cpu_share if cached else max(1.0, P / m["dram_speedup"])
    return cpu_share * messages + memory_share * memory + 2 * poll_sleeps(polls or m["polls"], m["sleep"])


def machine(args):
    m = vars(args)
    measured = {}
    for name in args.measured:
        with open(name) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                row = json.loads(line)
                if row.get("bench") == "allreduce_mpi":
                    measured.setdefault((row["processes"], row["bytes"]), []).append(row)
    counted = {}
    for item in (args.polls_counted or "").split(","):
        if item:
            P, S, k = item.split(":")
            counted[(int(P), int(S))] = float(k)
    print(f"| P (x cpu:1) | S | measured, ms (median of runs) | model ({args.polls:g} poll sleeps), ms "
          "| measured / model | poll sleeps counted | model with them, ms | MPI_Allreduce, ms "
          "| one-process ring cpu:P, ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (P, S) in sorted(measured):
        rows = measured[(P, S)]
        hier = statistics.median(r["hier_s"] for r in rows)
        mpi = statistics.median(r["mpi_s"] for r in rows)
        solo = statistics.median(r["solo_s"] for r in rows)
        model = machine_prediction(S, P, m)
        k = counted.get((P, S))
        again = f"{k:g} | {ms(machine_prediction(S, P, m, k))}" if k else " | "
        print(f"| {P} | {size_name(S)} | {ms(hier)} | {ms(model)} | {hier / model:.2f} | {again} | {ms(mpi)} "
              f"| {ms(solo)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("cluster")
    c.add_argument("--alpha-n", type=float, default=2e-6, help="one-way latency between nodes")
    c.add_argument("--beta-n", type=float, default=12e9, help="a node's NIC bandwidth, each way")
    c.add_argument("--o-n", type=float, default=0.5e-6, help="host and NIC cost of one more message")
    c.add_argument("--sleep", type=float, default=68e-6, help="what nanosleep(1 us) lasts (measured here)")
    c.add_argument("--polls", type=float, default=2.2, help="poll sleeps per exchange (measured here)")
    c.add_argument("--alpha-l", type=float, default=2e-6, help="a hand-off between device threads")
    c.add_argument("--copy", type=float, default=16.9e9, help="one thread's memcpy (bench/membw)")
    c.add_argument("--add", type=float, default=18.0e9, help="one thread's y += x (bench/membw)")
    c.add_argument("--devices", type=int, default=8)
    c.add_argument("--nodes", type=int, nargs="+", default=[8, 64, 512])
    c.add_argument("--sizes", type=int, nargs="+", default=[200744, 4 << 20, 100 << 20])
    k = sub.add_parser("machine")
    for flag in ("--alpha", "--beta", "--copy-cached", "--add-cached", "--copy-dram", "--add-dram", "--sleep"):
        k.add_argument(flag, type=float, required=True)
    k.add_argument("--dram-speedup", type=float, required=True, help="two threads' DRAM memcpy over one's")
    k.add_argument("--polls", type=float, default=2.2, help="poll sleeps per exchange")
    k.add_argument("--polls-counted", help="P:S:sleeps,... counted per exchange (MPI_Testall calls - 1)")
    k.add_argument("--cache", type=float, default=32 << 20, help="last-level cache bytes")
    k.add_argument("--cores", type=int, default=2)
    k.add_argument("--measured", nargs="+", required=True)
    args = parser.parse_args()
    if args.mode == "cluster":
        cluster(args)
    else:
        machine(args)


if __name__ == "__main__":
    main()
