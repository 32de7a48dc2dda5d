"""What every feature that asks the safety kernel says alike when it cannot.

A job submit and a workflow's dry run both ask the kernel at SAFETY_KERNEL_ADDR;
without an address each answers with the same reason, so an operator finds both
with one search.
"""

from __future__ import annotations

NO_KERNEL_REASON = "no safety kernel address configured"
"""Why no decision was asked for: SAFETY_KERNEL_ADDR is empty."""
