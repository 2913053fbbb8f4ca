"""Redriving dead letters against a real (fake-gcs-server) bucket: the claim is the exactly-once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotjobs.deadletters import DeadLetter, RedriveClaims, redrive

if TYPE_CHECKING:
    from google.cloud.storage import Bucket


def dead_letter(letter_id: str) -> DeadLetter:
    return DeadLetter(
        id=letter_id,
        data=b"{}",
        publish_time=None,
        attributes={"CloudPubSubDeadLetterSourceSubscription": "submit-job-push", "team": "a"},
    )


def test_a_redrive_whose_publish_fails_releases_its_claim_for_the_next_try(gcs_bucket: Bucket) -> None:
    letter = dead_letter("dl-1")

    def broken(topic: str, data: bytes, attributes: dict[str, str]) -> str:
        raise ConnectionError("Pub/Sub is down")

    results, acked = redrive([letter], claims=RedriveClaims(gcs_bucket), publish=broken, topic_path=str)
    assert [r.outcome for r in results] == ["failed"] and acked == []
    assert RedriveClaims(gcs_bucket).get("dl-1") is None
    sent: list[tuple[str, dict[str, str]]] = []

    def publish(topic: str, data: bytes, attributes: dict[str, str]) -> str:
        sent.append((topic, attributes))
        return "m-9"

    results, acked = redrive([letter], claims=RedriveClaims(gcs_bucket), publish=publish, topic_path=str)
    assert [(r.outcome, r.message_id) for r in results] == [("redriven", "m-9")] and acked == [letter]
    assert sent == [("job_requests", {"team": "a"})]


def test_a_claim_without_a_confirmed_publish_is_reported_not_resent(gcs_bucket: Bucket) -> None:
    letter = dead_letter("dl-2")
    claims = RedriveClaims(gcs_bucket)
    assert claims.claim(letter, "job_requests") is not None  # a redrive that crashed after claiming
    assert claims.claim(letter, "job_requests") is None
    results, acked = redrive([letter], claims=claims, publish=lambda t, d, a: "never", topic_path=str)
    assert [r.outcome for r in results] == ["already redriven"] and acked == []
    assert "not confirmed" in results[0].detail
    dry, _ = redrive(
        [dead_letter("dl-3")], claims=claims, publish=lambda t, d, a: "never", topic_path=str, dry_run=True
    )
    assert [r.outcome for r in dry] == ["would redrive"] and claims.get("dl-3") is None
