"""What moving a checkpoint costs: Cloud Storage's data transfer within Google Cloud, per GB, from
where the checkpoint is to the region an attempt runs in (https://cloud.google.com/storage/pricing,
"Network usage": data moving between locations on one continent, or between continents).

The rates are the order of those the page lists (North America and Europe within their continent,
between continents outside Oceania), not a quote: check them for a real bucket. Nothing is
charged within one region, or from a multi-region bucket (`US`, `EU`, `ASIA`) to a region on its
continent; a dual-region bucket (`NAM4`, `EUR4`, `ASIA1`, ...) is priced as a region of its
continent, which is dearer than reading it from one of its two regions (the safe side)."""

from __future__ import annotations

SAME_CONTINENT_PER_GB = 0.02
OTHER_CONTINENT_PER_GB = 0.08

# The first part of a region's name, and a dual-region's code without its digits: the continent.
_CONTINENTS = {
    "us": "north-america",
    "northamerica": "north-america",
    "nam": "north-america",
    "southamerica": "south-america",
    "europe": "europe",
    "eur": "europe",
    "eu": "europe",
    "asia": "asia",
    "me": "middle-east",
    "australia": "oceania",
    "africa": "africa",
}
MULTI_REGIONS = frozenset({"us", "eu", "asia"})


def continent(location: str) -> str | None:
    """The continent of a region (`us-east4`), a multi-region (`US`) or a dual-region (`NAM4`)."""
    head = location.strip().lower().split("-")[0].rstrip("0123456789")
    return _CONTINENTS.get(head)


def per_gb(source: str, region: str) -> float:
    """Dollars per GB to read from `source` (a bucket's location or a region) in `region`."""
    source, region = source.strip().lower(), region.strip().lower()
    if source == region:
        return 0.0
    same = continent(source) is not None and continent(source) == continent(region)
    if source in MULTI_REGIONS and same:
        return 0.0
    return SAME_CONTINENT_PER_GB if same else OTHER_CONTINENT_PER_GB
