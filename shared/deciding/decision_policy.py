"""What the deployment's settings say of decisions: `DecisionPolicy`, read once from `Settings` and
handed to `shared.deciding.decisions.decide`, the job's end (`shared.deciding.job_end`) and the
move of a waiting job (`shared.deciding.moves`)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.deciding.events import SignalPatterns, patterns_from
from shared.errors import Violation
from shared.ledger.records import RequestRecord
from shared.requests.policy import check_strategy
from shared.settings import DEFAULT_MAX_RUNTIME_SECONDS, Settings


@dataclass(frozen=True)
class DecisionPolicy:
    patterns: SignalPatterns
    storm_threshold: int
    requeue_delay_seconds: float
    default_max_attempts: int
    stuck_after_seconds: float
    kit_lines_settle_seconds: float
    changeover_prior_seconds: float
    reconcile_interval_seconds: float
    checkpoint_prior_seconds: float
    # What capacity other than Spot an attempt may be planned on (shared.requests.policy.check_strategy).
    allowed_fallback_strategies: tuple[str, ...]
    min_spot_attempts: int
    # What bounds continuations after the job timeout when a request names no smaller max_runtime.
    max_runtime_seconds: float = DEFAULT_MAX_RUNTIME_SECONDS

    @classmethod
    def from_settings(cls, settings: Settings) -> DecisionPolicy:
        return cls(
            patterns=patterns_from(settings),
            storm_threshold=settings.preemption_storm_threshold,
            requeue_delay_seconds=settings.requeue_delay_seconds,
            default_max_attempts=settings.default_max_attempts,
            stuck_after_seconds=settings.stuck_after_seconds,
            kit_lines_settle_seconds=settings.kit_lines_settle_seconds,
            changeover_prior_seconds=settings.changeover_prior_seconds,
            reconcile_interval_seconds=settings.reconcile_interval_seconds,
            checkpoint_prior_seconds=settings.checkpoint_prior_seconds,
            allowed_fallback_strategies=settings.allowed_fallback_strategies,
            min_spot_attempts=settings.min_spot_attempts,
            max_runtime_seconds=settings.max_runtime_seconds,
        )

    def refuses(self, strategy: str, record: RequestRecord, n: int) -> Violation | None:
        """Why attempt `n` of `record` may not run on `strategy` in this deployment, if it may not."""
        return check_strategy(
            strategy,
            record.spot_attempts_before(n),
            allowed_fallbacks=self.allowed_fallback_strategies,
            min_spot_attempts=self.min_spot_attempts,
        )
