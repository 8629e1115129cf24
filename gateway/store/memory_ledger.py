"""The in-process accounting store (`memory://`): for tests and single-process trials.

Every operation runs to its end without awaiting, so on one event loop each is atomic.
Nothing survives the process, and each worker process has its own (budgets are per
process then): use sqlite or redis for anything real.
"""

from __future__ import annotations

from collections import deque

import msgspec

from gateway.store.ledger import WINDOW_S
from gateway.store.ledger import Admission
from gateway.store.ledger import Admitted
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import KeySpend
from gateway.store.ledger import SpendRow
from gateway.store.ledger import judge
from gateway.store.ledger import window_of


class _KeyState:
    __slots__ = ("requests", "reservations", "spent", "tokens")

    def __init__(self) -> None:
        self.requests: deque[float] = deque()  # admission times, oldest first
        self.tokens: deque[tuple[float, int]] = deque()  # (settle time, tokens)
        self.reservations: dict[str, tuple[float, int]] = {}  # ticket -> (expires, nanos)
        self.spent: dict[str, int] = {}  # window -> nanos ("total": all time)


class MemoryLedger:
    def __init__(self) -> None:
        self._keys: dict[str, KeyRecord] = {}
        self._by_hash: dict[str, str] = {}
        self._state: dict[str, _KeyState] = {}
        self._spend: dict[tuple[str, str], SpendRow] = {}

    def _of(self, key_id: str) -> _KeyState:
        state = self._state.get(key_id)
        if state is None:
            state = self._state[key_id] = _KeyState()
        return state

    async def admit(self, ask: Admission) -> Admitted:
        record = ask.record
        if record is None:
            key_id = self._by_hash.get(ask.secret_hash)
            record = self._keys.get(key_id) if key_id is not None else None
            if record is None:
                return Admitted(verdict="unknown")
        state = self._of(record.id)
        horizon = ask.now - WINDOW_S
        while state.requests and state.requests[0] <= horizon:
            state.requests.popleft()
        while state.tokens and state.tokens[0][0] <= horizon:
            state.tokens.popleft()
        live = {t: r for t, r in state.reservations.items() if r[0] > ask.now}
        state.reservations = live
        window = window_of(record, ask.windows)
        verdict, retry = judge(
            record,
            ask,
            rpm_count=len(state.requests),
            rpm_oldest=state.requests[0] if state.requests else None,
            tpm_used=sum(n for _, n in state.tokens),
            tpm_oldest=state.tokens[0][0] if state.tokens else None,
            spent=state.spent.get(window, 0),
            held=sum(n for _, n in live.values()),
        )
        if verdict != "ok":
            return Admitted(verdict=verdict, record=record, retry_after_s=retry)
        if record.rpm is not None:
            state.requests.append(ask.now)
        reserved = ask.reserve_nanos if record.budget_nanos is not None else 0
        if reserved:
            live[ask.ticket] = (ask.now + ask.hold_s, reserved)
        return Admitted(verdict="ok", record=record, window=window, reserved_nanos=reserved)

    async def settle(self, charge: Charge) -> None:
        if charge.key_id:
            state = self._of(charge.key_id)
            state.reservations.pop(charge.ticket, None)
            for window in {"total", charge.window or "total"}:
                state.spent[window] = state.spent.get(window, 0) + charge.cost_nanos
            tokens = charge.input_tokens + charge.output_tokens
            state.tokens.append((charge.now, tokens))
        row = self._spend.get((charge.key_id, charge.model))
        if row is None:
            row = self._spend[(charge.key_id, charge.model)] = SpendRow(
                key_id=charge.key_id, model=charge.model
            )
        row.cost_nanos += charge.cost_nanos
        row.requests += 1
        row.input_tokens += charge.input_tokens
        row.output_tokens += charge.output_tokens
        row.estimated += int(charge.estimated)

    async def count_hits(self, hits: list[CacheHits]) -> None:
        for hit in hits:
            row = self._spend.get((hit.key_id, hit.model))
            if row is None:
                row = self._spend[(hit.key_id, hit.model)] = SpendRow(
                    key_id=hit.key_id, model=hit.model
                )
            row.cache_hits += hit.hits
            row.cache_saved_nanos += hit.saved_nanos

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        if key_id in self._state:
            self._state[key_id].reservations.pop(ticket, None)

    async def create_key(self, record: KeyRecord) -> None:
        self._keys[record.id] = record
        self._by_hash[record.secret_hash] = record.id

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        key_id = self._by_hash.get(secret_hash)
        return self._keys.get(key_id) if key_id is not None else None

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return self._keys.get(key_id)

    async def list_keys(self) -> list[KeyRecord]:
        return sorted(self._keys.values(), key=lambda r: (r.created_at, r.id))

    async def revoke_key(self, key_id: str) -> bool:
        record = self._keys.get(key_id)
        if record is None:
            return False
        self._keys[key_id] = msgspec.structs.replace(record, revoked=True)
        return True

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend:
        state = self._state.get(key_id)
        if state is None:
            return KeySpend()
        held = sum(n for expires, n in state.reservations.values() if expires > now)
        return KeySpend(
            total_nanos=state.spent.get("total", 0),
            window_nanos=state.spent.get(window, 0),
            reserved_nanos=held,
        )

    async def spend(self) -> list[SpendRow]:
        return [msgspec.structs.replace(row) for row in self._spend.values()]

    async def close(self) -> None:
        pass
