"""The decision rules' error rates by simulation (issue #43): each rule that labels a shape, a
direction or a finding, its false-label rate and its power in the default configuration's noise
(CPU sweeps: batch 1-8, three repeats, a repeat's log sd 0.10, engine spread 0.043) and in the
study's (GPU sweeps: batch 1-128, three repeats, 2% per point), and the acceptance test's size at
the smallest design a row is tested in (10 requests in the smaller arm); and how often each
routing finding decided by an interval over requests is "shown" in traces without temporal
locality (specmoe.measured.rules.finding_rates).

    .venv/bin/python bench/decision_rules.py [--trials 4000] [--json]

The shape and direction rules are the pipeline's own (specmoe.measured.sweep.shape_labels,
direction_labels) applied to simulated sweeps estimated as speedup_curve estimates them
(specmoe.measured.rules); the acceptance test is specmoe.routing.acceptance.cluster_robust_p on
simulated null samples (cluster_test_size). False-label rate: the largest share of sweeps given a
label among the true curves for which it is false (rules.scenarios: clear shapes and near misses,
e.g. concave curves peaking at batch 2 or 4 by 8-10%); power: the share given the label where the
true curve has it clearly. The tests hold every false-label rate to at most 5% and the size to at
most 7%. Fixed seeds: the table is the same on every machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specmoe.measured.rules import direction_table, finding_rates, shape_table  # noqa: E402
from specmoe.routing.acceptance import cluster_test_size  # noqa: E402
from specmoe.routing.bootstrap import MIN_REQUESTS  # noqa: E402

# (requests with accepted drafts, requests with first-rejected drafts, requests in both)
DESIGNS = ((MIN_REQUESTS, MIN_REQUESTS, 0), (60, MIN_REQUESTS, 0), (60, MIN_REQUESTS, 10),
           (MIN_REQUESTS, MIN_REQUESTS, MIN_REQUESTS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4000, help="simulated sweeps per curve")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args(argv)
    rules = shape_table(trials=a.trials) + direction_table(trials=a.trials)
    sizes = [{"accepted_requests": acc, "rejected_requests": rej, "in_both": both,
              "size_at_5pct": cluster_test_size(acc, rej, both, trials=a.trials // 2)}
             for acc, rej, both in DESIGNS]
    findings = finding_rates(trials=a.trials // 10)
    if a.json:
        print(json.dumps({"rules": rules, "findings_false_label": findings,
                          "acceptance_test_size": sizes}, indent=1))
        return 0
    print(f"{'rule':32} {'noise':14} {'false label':>11} {'power':>6}  worst case / power case")
    for r in rules:
        print(f"{r['rule']:32} {r['noise']:14} {r['false_label_rate']:>11.3f} "
              f"{r['power']:>6.3f}  {r['worst_case']} / {r['power_case']}")
    print(f"\nrouting findings 'shown' in {a.trials // 10} simulated traces without temporal "
          "locality (per-request expert preference, no order; 40 requests):")
    for name, rate in findings.items():
        print(f"  {name:52} {rate:.3f}")
    print("\ncluster test (CR2, Imbens-Kolesar df) on null samples, nominal 5%:")
    for s in sizes:
        print(f"  {s['accepted_requests']:3d} requests with accepted drafts, "
              f"{s['rejected_requests']:3d} with first-rejected ones, {s['in_both']:3d} in both: "
              f"rejects {s['size_at_5pct']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
