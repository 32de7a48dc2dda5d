"""What a million jobs cost in Lambda, from the durations the control-plane benchmark
measured and the memory the CDK app gives each function, beside Step Functions.

Prices (us-east-1, x86_64, on-demand list prices, taken 2026-11-27, the ones
docs/aws.md uses): Lambda $0.0000166667 per GB-second and $0.20 per million
requests; Step Functions Standard $0.025 per 1,000 state transitions. Lambda bills
each invocation's duration rounded up to the millisecond: the gateway is one
invocation per job, the submit and result functions one per SQS batch (priced for
batches of 1, a quiet queue, and of 10, a busy one, with the batch's duration ten
jobs' worth). The durations are wall time per job on loopback (Redis, NATS and the
kernel a few microseconds away; on AWS each wait is longer, so count on more); the
CPU time beside them is the least a duration can be. A job orchestrated by Step
Functions Standard instead would take at least 3 state transitions for the same work
(submit, dispatch, result), before the Lambda it calls.

    python -m tests.bench.lambda_cost GATEWAY_MS SUBMIT_MS RESULT_MS
"""

from __future__ import annotations

import ast
import math
import sys
from typing import Any

from tests.bench.common import ROOT

GB_SECOND_USD = 0.0000166667
REQUEST_USD = 0.20 / 1_000_000
SFN_TRANSITION_USD = 0.025 / 1000
SFN_TRANSITIONS_PER_JOB = 3
PRICES_TAKEN = "2026-11-27"
FUNCTIONS = ("gateway", "submit", "result")
SPECS = ROOT / "infra" / "cdk" / "cordum_infra" / "functions.py"


def memory_mb() -> dict[str, int]:
    """Each function's ``memory_mb`` as the CDK app's FunctionSpec declares it (read, not
    imported: the CDK library is not needed to price)."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(SPECS.read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "FunctionSpec"
                and node.args and isinstance(node.args[0], ast.Constant)):
            for kw in node.keywords:
                if kw.arg == "memory_mb" and isinstance(kw.value, ast.Constant):
                    out[str(node.args[0].value)] = int(kw.value.value)
    return out


def per_million(ms_per_job: float, mb: int, batch: int) -> float:
    """USD for a million jobs of one function: duration rounded up per invocation."""
    invocations = 1_000_000 / batch
    billed_s = math.ceil(ms_per_job * batch) / 1000
    return invocations * (billed_s * mb / 1024 * GB_SECOND_USD + REQUEST_USD)


def cost_table(cpu_ms: dict[str, float], wall_ms: dict[str, float]) -> dict[str, Any]:
    mem = memory_mb()
    rows = []
    for fn in FUNCTIONS:
        batches = (1,) if fn == "gateway" else (1, 10)
        rows.append({"function": fn, "memory_mb": mem[fn], "cpu_ms": cpu_ms.get(fn, 0.0),
                     "ms": wall_ms[fn],
                     "usd": {str(b): per_million(wall_ms[fn], mem[fn], b) for b in batches}})
    total_1 = sum(r["usd"]["1"] for r in rows)
    total_10 = sum(r["usd"].get("10", r["usd"]["1"]) for r in rows)
    return {"rows": rows, "total_batch_1": total_1, "total_batch_10": total_10,
            "sfn_transitions": SFN_TRANSITIONS_PER_JOB,
            "sfn_usd": 1_000_000 * SFN_TRANSITIONS_PER_JOB * SFN_TRANSITION_USD,
            "prices_taken": PRICES_TAKEN}


def lines(table: dict[str, Any]) -> list[str]:
    """The table as Markdown (the README's, and what the benchmark prints)."""
    out = ["| function | memory | duration per job (CPU) | per 1M jobs, batches of 1 | "
           "per 1M jobs, batches of 10 |", "|---|---:|---:|---:|---:|"]
    for r in table["rows"]:
        ten = f"${r['usd']['10']:.2f}" if "10" in r["usd"] else f"${r['usd']['1']:.2f}"
        out.append(f"| {r['function']} | {r['memory_mb']} MB | {r['ms']:.2f} ms "
                   f"({r['cpu_ms']:.2f}) | ${r['usd']['1']:.2f} | {ten} |")
    out.append(f"| **Lambda, the three** | | | **${table['total_batch_1']:.2f}** | "
               f"**${table['total_batch_10']:.2f}** |")
    out.append(f"| Step Functions Standard, {table['sfn_transitions']} transitions a job "
               f"(before its Lambda) | | | ${table['sfn_usd']:.2f} | ${table['sfn_usd']:.2f} |")
    return out


def details(info: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md's lines under the control-plane figures (tests/bench/report.py)."""
    return ["", f"Per job, over {info['batches']} batches of 10 (the last one): Redis round "
                f"trips {info['trips']} (floor {info['floor_trips']}), NATS publishes "
                f"{info['pubs']} (floor {info['floor_pubs']}). Lambda cost per million jobs "
                "from the median durations (tests/bench/lambda_cost.py):", "",
            *lines(info["cost"])]


def print_cost(table: dict[str, Any]) -> None:
    print(f"Lambda cost per million jobs (x86, us-east-1, $0.0000166667 per GB-s, $0.20 per "
          f"million requests, prices of {table['prices_taken']}):")
    for line in lines(table):
        print("  " + line)


if __name__ == "__main__":
    ms = dict(zip(FUNCTIONS, (float(a) for a in sys.argv[1:4]), strict=True))
    print_cost(cost_table(ms, ms))
