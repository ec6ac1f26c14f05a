"""The rule a comparison is held to, and its verdict: bitwise (the same bits), within
N ULP, or close (torch.testing's |actual - expected| <= atol + rtol * |expected|, with
its per-dtype defaults). Runtimes of one package are compared bitwise; compiled code
against eager under a tolerance.

cpp_runtime/core/tolerance.cpp implements the same rule, report line and verdict
line; tests/contract/comparison_vectors.json pins both, word for word. The checks a
runner makes and how its lines name each output are cpp_runtime/core/check_plan.cpp's
(check_plan_vectors.json and label_vectors.json)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..errors import InputError, VerificationError
from ..package.spec import BITWISE, CLOSE, RULES, ULP, PackageSpec, Tolerance, fmt, tensor_names
from .bits import BitReport, as_real, compare_bits, ulp_distance

__all__ = [
    "BITWISE", "CLOSE", "RULES", "ULP", "Check", "Comparison", "Tolerance", "compare", "compared_labels", "fmt",
    "list_verdict", "output_labels", "plan_checks", "tensor_key", "tolerance_from_options", "verdict_line",
]

# The verdict over a list of comparisons.
PASSED = "passed"  # every comparison bit-identical
PASSED_WITHIN_TOLERANCE = "passed_within_tolerance"  # bits differ, every element within the rule
FAILED = "failed"


def tolerance_from_options(
    *, bitwise: bool = False, max_ulp: int | None = None, rtol: float | None = None, atol: float | None = None,
    default: Tolerance | None,
) -> Tolerance | None:
    """The rule the command-line options ask for, else ``default``. At most one of
    --bitwise, --max-ulp and --rtol/--atol; rtol and atol go together, as in
    torch.testing.assert_close.

    Raises:
        InputError: conflicting or incomplete options.
    """
    given = [name for name, set_ in (("--bitwise", bitwise), ("--max-ulp", max_ulp is not None),
                                      ("--rtol/--atol", rtol is not None or atol is not None)) if set_]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} each choose the rule; pass only one of them")
    if (rtol is None) != (atol is None):
        raise InputError(
            "--rtol and --atol go together (as in torch.testing.assert_close): pass both, e.g. "
            "--rtol 1e-4 --atol 1e-5, or neither for torch.testing's defaults for each dtype"
        )
    for flag, value in (("--rtol", rtol), ("--atol", atol)):
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise InputError(f"{flag} must be a finite number >= 0, got {value}")
    if max_ulp is not None and not 0 <= max_ulp <= 2**63 - 1:
        raise InputError(f"--max-ulp must be an integer in [0, 2^63 - 1], got {max_ulp}")
    if bitwise or max_ulp == 0:
        return Tolerance(BITWISE)
    if max_ulp is not None:
        return Tolerance(ULP, max_ulp=max_ulp)
    if rtol is not None:
        return Tolerance(CLOSE, rtol=rtol, atol=atol)
    return default


@dataclass(frozen=True)
class Comparison:
    """One tensor against its reference under a rule. ``str()`` is the report line:
    the bit report, then, for a tolerance, how many elements fall outside it."""

    bits: BitReport
    tolerance: Tolerance
    dtype: torch.dtype
    num_outside: int
    first_outside: str = ""  # "[i, j]: got X, expected Y" for the first element outside

    @property
    def passed(self) -> bool:
        # A dtype or shape difference fails, even with no element to count.
        return self.num_outside == 0 and not self.bits.reason

    @property
    def rule(self) -> str:
        return self.tolerance.describe(self.dtype)

    def __str__(self) -> str:
        line = str(self.bits)
        if self.tolerance.rule == BITWISE or self.bits.identical or self.bits.reason:
            return line
        line += f"; {self.num_outside} of {self.bits.numel} outside the tolerance"
        return line + (f", first at {self.first_outside}" if self.first_outside else "")


def compare(actual: torch.Tensor, expected: torch.Tensor, tolerance: Tolerance) -> Comparison:
    """Compare ``actual`` with ``expected`` under ``tolerance``.

    Bits are compared first (``compare_bits``); elements that differ are then held to
    the rule. CLOSE is torch.isclose in float64 with equal_nan, as
    torch.testing.assert_close compares: NaN must face NaN, ±inf the same inf, and a
    NaN where the reference has a number is outside any tolerance. Integers with
    rtol and atol 0 (their default) compare exactly. Complex tensors are compared as
    their real and imaginary parts. A dtype or shape difference always fails.
    """
    bits = compare_bits(actual, expected)
    if bits.identical:
        return Comparison(bits, tolerance, expected.dtype, 0)
    if bits.reason or tolerance.rule == BITWISE:
        return Comparison(bits, tolerance, expected.dtype, bits.num_differ)
    a_real, e_real = as_real(actual), as_real(expected)
    a = a_real.detach().cpu().resolve_neg().flatten()
    e = e_real.detach().cpu().resolve_neg().flatten()
    if tolerance.rule == ULP:
        outside = ulp_distance(actual, expected) > tolerance.max_ulp
    else:
        rtol, atol = tolerance.resolve(expected.dtype)
        if not e.dtype.is_floating_point and rtol == 0 and atol == 0:
            outside = a != e  # exactly, past float64's 53 bits
        else:
            outside = ~torch.isclose(a.double(), e.double(), rtol=rtol, atol=atol, equal_nan=True)
    num_outside = int(outside.sum())
    first = ""
    if num_outside:
        flat = int(outside.nonzero()[0])
        index = ", ".join(str(int(i)) for i in torch.unravel_index(torch.tensor(flat), tuple(e_real.shape)))
        first = f"[{index}]: got {fmt(float(a[flat]))}, expected {fmt(float(e[flat]))}"
    return Comparison(bits, tolerance, expected.dtype, num_outside, first)


def compare_outputs(
    outputs: Sequence[torch.Tensor],
    references: Sequence[torch.Tensor],
    tolerance: Tolerance,
    label: Callable[[int], str],
    what: str = "the package",
    reference_name: str = "reference",
) -> list[tuple[str, Comparison]]:
    """Each output against its reference under ``tolerance``, labelled ``label(k)``:
    the one comparison the runners' checks, ``Package.verify`` and the export's check
    against eager share.

    Raises:
        VerificationError: the counts differ (in aoti_runner's words).
    """
    if len(outputs) != len(references):
        raise VerificationError(
            f"{what} returned {len(outputs)} output(s), but there are {len(references)} {reference_name} "
            "tensor(s) to compare with"
        )
    return [(label(k), compare(actual, expected.to(actual.device), tolerance))
            for k, (actual, expected) in enumerate(zip(outputs, references))]


def list_verdict(comparisons: list[Comparison]) -> str:
    """PASSED if every comparison is bit-identical (two empty lists are: nothing
    differs), PASSED_WITHIN_TOLERANCE if every one is within its rule but some bits
    differ, else FAILED."""
    if not all(c.passed for c in comparisons):
        return FAILED
    return PASSED if all(c.bits.identical for c in comparisons) else PASSED_WITHIN_TOLERANCE


def verdict_line(comparisons: list[Comparison]) -> str:
    """The verdict and why, e.g. "PASSED (bit-identical)", or "FAILED (rtol 1.3e-06,
    atol 1e-05: max abs diff 0.5, max rel diff 0.25, max ULP distance 4194304; 3 of
    12 elements outside the tolerance)"."""
    verdict = list_verdict(comparisons)
    if verdict == PASSED:
        return "PASSED (bit-identical)"
    differing = [c for c in comparisons if not c.bits.identical]
    rules = {c.rule for c in comparisons}
    rule = rules.pop() if len(rules) == 1 else comparisons[0].tolerance.describe()
    numel = sum(c.bits.numel for c in comparisons)
    measured = [c.bits for c in differing if not c.bits.reason]
    if len(measured) < len(differing):
        stats = next(c.bits.reason for c in differing if c.bits.reason)
    else:
        stats = (
            f"max abs diff {fmt(max(b.max_abs_diff or 0.0 for b in measured))}, "
            f"max rel diff {fmt(max(b.max_rel_diff or 0.0 for b in measured))}, "
            f"max ULP distance {_fmt_ulp(max(b.max_ulp or 0.0 for b in measured))}"
        )
    if comparisons[0].tolerance.rule == BITWISE:
        count = f"{sum(c.bits.num_differ for c in comparisons)} of {numel} elements differ"
    else:
        count = f"{sum(c.num_outside for c in comparisons)} of {numel} elements outside the tolerance"
    if verdict == PASSED_WITHIN_TOLERANCE:
        within = rule if rule.startswith("within ") else f"within {rule}"
        return f"PASSED (NOT bit-identical, {within}: {stats}; {count})"
    return f"FAILED ({rule}: {stats}; {count})"


def _fmt_ulp(value: float) -> str:
    return "inf" if value == math.inf else str(int(value))


@dataclass
class Check:
    """One check of a runtime's outputs: its name, what its references are called,
    the references, and the rule."""

    name: str
    reference_name: str
    references: list[torch.Tensor]
    tolerance: Tolerance


# The names of the checks, as both runners print them.
RUNTIME_PARITY = "runtime parity"
COMPILED_VS_EAGER = "compiled vs eager"
IDENTITY = "identity"


def plan_checks(
    *, expected: list[torch.Tensor] | None, eager: list[torch.Tensor] | None, inputs: list[torch.Tensor],
    is_identity: bool, recorded: Tolerance | None, override: Tolerance | None,
) -> list[Check]:
    """The checks a runner makes (cpp_runtime/core/check_plan.cpp plans the same for
    aoti_runner; tests/contract/check_plan_vectors.json pins both):

    - runtime parity, against ``expected`` (the package's own outputs): bitwise;
    - compiled vs eager, against ``eager``: the ``recorded`` rule of the package,
      else torch.testing's defaults;
    - without either, for an identity model: the outputs against the inputs, bitwise.

    ``override`` (from --bitwise/--max-ulp/--rtol/--atol) replaces the rule of the
    eager check if there is one, else of the other check.
    """
    checks = []
    if expected is not None:
        rule = override if override is not None and eager is None else Tolerance(BITWISE)
        checks.append(Check(RUNTIME_PARITY, "expected", expected, rule))
    if eager is not None:
        checks.append(Check(COMPILED_VS_EAGER, "eager", eager, override or recorded or Tolerance(CLOSE)))
    if not checks and is_identity:
        checks.append(Check(IDENTITY, "input", inputs, override or Tolerance(BITWISE)))
    return checks


def tensor_key(role: str, index: int, name: str = "") -> str:
    """How a report names a tensor: "output 'scores'" by its recorded name,
    "output[0]" by index where it has none."""
    return f"{role} '{name}'" if name else f"{role}[{index}]"


def output_labels(spec: PackageSpec, count: int) -> list[str]:
    """How reports name each of ``count`` outputs: "output 'scores'" when the model
    returns its outputs by name (``PackageSpec.named_outputs``), else "output[0]"."""
    names = spec.named_outputs(count)
    return [tensor_key("output", k, names[k] if names else "") for k in range(count)]


def compared_labels(spec: PackageSpec, reference_name: str, count: int) -> list[str]:
    """How a verify line names each of ``count`` outputs and what it is compared
    with: "output 'scores' vs expected 'scores'" when the model returns its outputs
    by name, else "output[0] vs expected[0]". ``reference_name`` is a check's
    ("expected", "eager" or "input"); the identity check's references are the inputs,
    named by their own recorded names ("output 'y' vs input 'x'").
    cpp_runtime/core/check_plan.cpp's compared_labels says the same."""
    names = spec.named_outputs(count)
    # With outputs by name, each reference is named too: an output's own name, or for
    # the identity check the input it is compared with.
    references = names if not names or reference_name != "input" else tensor_names(spec.inputs)
    return [
        f"{output} vs {tensor_key(reference_name, k, references[k] if k < len(references) else '')}"
        for k, output in enumerate(output_labels(spec, count))
    ]
