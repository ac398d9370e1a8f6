"""Sizes as ccache reads them (k, M, G decimal; Ki, Mi, Gi binary; 1e9) and durations (1h30m, 2w)."""

from __future__ import annotations

import pytest

from gtcache.policies import parse_duration, parse_size

DAY = 86400


@pytest.mark.parametrize(("text", "size"), [
    ("500", 500), ("0", 0), ("2k", 2000), ("2K", 2000), ("2KB", 2000), ("2Ki", 2048), ("2KiB", 2048),
    ("20G", 20 * 10**9), ("20GB", 20 * 10**9), ("20g", 20 * 10**9), ("20Gi", 20 * 2**30), ("1.5GiB", 3 * 2**29),
    ("1e9", 10**9), ("1.5e3M", 1.5 * 10**9), (" 500 M ", 500 * 10**6), ("3T", 3 * 10**12), ("1Ti", 2**40),
    ("512B", 512), (".5k", 500),
])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("1.5", 1.5), ("90s", 90), ("30m", 1800), ("12h", 12 * 3600), ("7d", 7 * DAY), ("2w", 14 * DAY),
    ("1h30m", 5400), ("1d 12h", 1.5 * DAY), ("1.5d", 1.5 * DAY), ("2W", 14 * DAY), ("1w2d3h4m5s", 9 * DAY + 3 * 3600 + 245),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["ten", "5X", "", "-3", "20GG", "2Kii", "G", "1e", "nan", "inf", "1,5G", "20 G B x"])
def test_bad_sizes(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a size; give a number of bytes"):
        parse_size(bad)


@pytest.mark.parametrize("bad", ["", "-3d", "3x", "1h1h", "h", "d7", "1 h 30", "nan", "1y"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a duration; give seconds"):
        parse_duration(bad)


def test_too_large_is_its_own_message() -> None:
    with pytest.raises(ValueError, match="too large a size"):
        parse_size("9" * 400 + "G")
    with pytest.raises(ValueError, match="too large a size"):
        parse_size("10000P")  # over 2**63 - 1 bytes
    with pytest.raises(ValueError, match="too long a duration"):
        parse_duration("1e300w")
