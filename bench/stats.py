"""What every benchmark reports: percentiles of its samples."""


def pct(values, q):
    """The q-quantile (0..1) of `values`, interpolated between the nearest two samples."""
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
