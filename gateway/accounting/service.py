"""Accounting for one request: who is asking, what may it reserve, what did it cost.

`Accounting` lives on the Application (under ACCOUNTING). An inbound handler identifies the
caller (`principal`, no store call), `admit` makes the one store call before the upstream
request (virtual keys only: checks and a reservation in one atomic step), and `settle` or
`release` the one after. Requests with the master key, or without a key on an open gateway,
are costed and counted in the spend per model, with no reservation and no limit.

A reservation is the request's most expensive outcome that can be known up front: the
prompt estimate at the input price plus its output cap (max tokens, or DEFAULT_OUTPUT_CAP)
at the output price, the dearest of its planned targets. Concurrent requests of one key can
together overshoot its budget only by what the requests in flight spend beyond their
reservations, which is nothing for a request that set its max tokens.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Literal
from typing import NamedTuple

from aiohttp import web

from gateway.accounting.cache_hits import HitTally
from gateway.accounting.keys import budget_windows
from gateway.accounting.keys import hash_secret
from gateway.accounting.keys import static_keys
from gateway.accounting.prices import ModelPrice
from gateway.accounting.prices import PriceTable
from gateway.accounting.prices import cost_nanos
from gateway.accounting.prices import most_cost_nanos
from gateway.config import Config
from gateway.config import ProviderConfig
from gateway.errors import AuthenticationFailed
from gateway.errors import PermissionDenied
from gateway.errors import RateLimited
from gateway.store.kv import StoreError
from gateway.store.ledger import Admission
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import Ledger
from gateway.wire.openai_chat import Usage

log = logging.getLogger("gateway.accounting")
# a reservation outlives the longest request by this much, then frees itself (a crash)
HOLD_MARGIN_S = 60.0


@dataclass(slots=True)
class Principal:
    """Who is asking: the master key, anyone (open gateway), or a virtual key (by the hash
    of its secret; `static` when it is one of the config's)."""

    kind: Literal["master", "open", "virtual"]
    secret_hash: str = ""
    static: KeyRecord | None = None


@dataclass(slots=True)
class Ticket:
    """One admitted request: its key (None for master/anonymous) and its reservation."""

    model: str
    prompt_tokens: int
    key: KeyRecord | None = None
    id: str = ""  # the store's identity of the request: minted by the gateway
    request_id: str = ""  # the x-request-id (the client's, or minted): for log lines only
    window: str = ""
    reserved_nanos: int = 0
    done: bool = False


class Settled(NamedTuple):
    """What a request was charged (a tuple: made on every request)."""

    cost_nanos: int
    estimated: bool


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request may be served: provider name and kind, upstream model id."""

    provider: str
    kind: str
    model: str


@dataclass
class Accounting:
    config: Config
    ledger: Ledger
    prices: PriceTable = field(default_factory=PriceTable.shipped)

    def __post_init__(self) -> None:
        self.static_keys = static_keys(self.config.keys)
        self._overrides = {
            m.name: ModelPrice.of(m.price) for m in self.config.models if m.price is not None
        }
        self._pair_prices = _pair_prices(self.config)
        self._hold_s = self.config.routing.deadline_s + HOLD_MARGIN_S
        self._unpriced: set[str] = set()  # models already logged as having no price
        # a client sends its key on every request: hash it once (bounded; cleared when full)
        self._hashes: dict[str, str] = {}
        self._targets: dict[tuple[str, str], Target] = {}  # made once per provider and model
        self.hits = HitTally(self.ledger)  # response-cache hits, on their way to the spend

    def reconfigure(self, config: Config) -> None:
        """Serve `config` from now on (a reload, gateway/server/reload.py): its static keys,
        prices, auth and hold, on the same ledger (spend, budgets and windows carry on:
        a static key's id is its name). A request admitted before settles at the prices in
        force when it ends."""
        self.config = config
        self.__post_init__()

    def target(self, provider: ProviderConfig, model: str) -> Target:
        """The Target of serving upstream `model` on `provider` (one object per pair)."""
        found = self._targets.get((provider.name, model))
        if found is None:
            found = Target(provider=provider.name, kind=provider.kind, model=model)
            self._targets[(provider.name, model)] = found
        return found

    # --- who ---------------------------------------------------------------------------

    def principal(self, token: str | None) -> Principal:
        """The caller behind `token` (the bearer). Raises 401 when a master key is set and
        no key came. A token that is not the master key is taken for a virtual key: whether
        one exists is only known at `admit` (so that admitting costs one store call)."""
        master = self.config.auth.master_key
        if token is None:
            if master:
                raise AuthenticationFailed(
                    "Missing API key: send it as 'Authorization: Bearer <key>'",
                    code="missing_api_key",
                )
            return Principal("open")
        if master and hmac.compare_digest(token.encode(), master.reveal().encode()):
            return Principal("master")
        secret_hash = self._hashes.get(token)
        if secret_hash is None:
            if len(self._hashes) >= 1024:
                self._hashes.clear()
            secret_hash = self._hashes[token] = hash_secret(token)
        kind: Literal["open", "virtual"] = "virtual" if master else "open"
        return Principal(kind, secret_hash=secret_hash, static=self.static_keys.get(secret_hash))

    async def key_of(self, principal: Principal) -> KeyRecord | None:
        """The key record of a virtual key (admin-path lookups: not the hot path); raises
        401 for a key that does not exist, is revoked or has expired."""
        if not principal.secret_hash:
            return None
        record = principal.static or await self.ledger.find_key(principal.secret_hash)
        if record is None:
            if principal.kind == "open":
                return None
            raise AuthenticationFailed("Incorrect API key provided")
        _refuse_dead_key(record, time.time())
        return record

    async def permit_hit(self, principal: Principal, model: str) -> KeyRecord | None:
        """May this key be answered for `model` from the response cache? A hit reserves and
        spends nothing, but a key that is unknown, revoked or expired, or may not use the
        model, is refused as `admit` would refuse it (a cached answer is still the model's
        answer). Rate limits do not count hits: they send nothing upstream."""
        if not principal.secret_hash:
            return None
        record = await self.key_of(principal)
        if record is not None and record.models is not None and model not in record.models:
            raise PermissionDenied(
                f"This key may not use the model '{model}'", param="model", code="model_not_allowed"
            )
        return record

    # --- before the upstream -------------------------------------------------------------

    async def admit(
        self,
        principal: Principal,
        *,
        model: str,
        targets: list[Target],
        prompt_tokens: int,
        output_cap: int,
        ticket_id: str,
        request_id: str = "",
    ) -> Ticket:
        ticket = Ticket(model, prompt_tokens, request_id=request_id)
        if not principal.secret_hash:
            return ticket
        reserve, priced = 0, True
        for target in targets:
            price = self.price(model, target)
            if price is None:
                priced = False
            else:
                reserve = max(reserve, most_cost_nanos(prompt_tokens, output_cap, price))
        if not priced and principal.static is not None and _metered(principal.static):
            raise _not_priced(model)  # known before the store call: no window entry made
        now = time.time()
        admitted = await self.ledger.admit(
            Admission(
                ticket=ticket_id,
                now=now,
                model=model,
                reserve_nanos=reserve,
                tokens=prompt_tokens,
                hold_s=self._hold_s,
                windows=budget_windows(now),
                secret_hash="" if principal.static else principal.secret_hash,
                record=principal.static,
            )
        )
        verdict, record = admitted.verdict, admitted.record
        if verdict == "unknown" or record is None:
            if principal.kind == "open":
                return ticket  # an open gateway serves a token that is no key, anonymously
            raise AuthenticationFailed("Incorrect API key provided")
        if verdict in ("revoked", "expired"):
            _refuse_dead_key(record, now)
        if verdict == "model":
            raise PermissionDenied(
                f"This key may not use the model '{model}'", param="model", code="model_not_allowed"
            )
        if verdict in ("rpm", "tpm"):
            limit = record.rpm if verdict == "rpm" else record.tpm
            what = "requests" if verdict == "rpm" else "tokens"
            err = RateLimited(f"Rate limit of {limit} {what} per minute reached for this key")
            err.headers["Retry-After"] = str(max(1, -int(-admitted.retry_after_s // 1)))
            raise err
        if verdict == "budget":
            raise RateLimited(
                "The budget of this key is exhausted (or too little is left to cover this "
                "request's maximum cost; a smaller max_tokens may fit)",
                code="budget_exceeded",
            )
        ticket.key, ticket.id = record, ticket_id
        ticket.window, ticket.reserved_nanos = admitted.window, admitted.reserved_nanos
        if not priced and _metered(record):
            # A stored key's limits are only known once the store answered: give the
            # reservation back (the request still counts toward its rpm window).
            await self.release(ticket)
            raise _not_priced(model)
        return ticket

    # --- after the upstream --------------------------------------------------------------

    def price(self, model: str, target: Target) -> ModelPrice | None:
        """The price of serving client model `model` on `target`: the model's config
        override, else the shipped table's entry for the upstream model."""
        override = self._overrides.get(model)
        if override is not None:
            return override
        if self._pair_prices:
            paired = self._pair_prices.get((target.provider, target.model))
            if paired is not None:
                return paired
        found = self.prices.lookup(target.model, target.kind)
        if found is None and target.model not in self._unpriced:
            self._unpriced.add(target.model)
            log.warning(
                "no price for model %r (provider %r): its requests cost 0; set models[].price",
                target.model,
                target.provider,
            )
        return found

    async def settle(
        self, ticket: Ticket, usage: Usage, *, estimated: bool, target: Target
    ) -> Settled:
        """Record the cost of `usage` (replacing the reservation). A store that does not
        answer loses this record, not the answer: it is logged, and the reservation keeps
        holding the budget until it expires."""
        price = self.price(ticket.model, target)
        cost = cost_nanos(usage, price) if price is not None else 0
        ticket.done = True
        charge = Charge(
            key_id=ticket.key.id if ticket.key is not None else "",
            model=f"{target.provider}/{target.model}",
            cost_nanos=cost,
            input_tokens=max(usage.prompt_tokens, 0),
            output_tokens=max(usage.completion_tokens, 0),
            estimated=estimated,
            now=time.time(),
            ticket=ticket.id,
            window=ticket.window,
            reserved_nanos=ticket.reserved_nanos,
        )
        try:
            await self.ledger.settle(charge)
        except StoreError as exc:
            log.error(
                "spend of request %s (ticket %s) not recorded: %s",
                ticket.request_id or "-",
                ticket.id or "-",
                exc,
            )
        return Settled(cost, estimated)

    async def release(self, ticket: Ticket) -> None:
        """Give a failed request's reservation back."""
        if ticket.done:
            return
        ticket.done = True
        if ticket.key is None or not ticket.reserved_nanos:
            return
        try:
            await self.ledger.release(ticket.key.id, ticket.id, ticket.reserved_nanos)
        except StoreError as exc:
            log.warning(
                "reservation of request %s (ticket %s) not released (it expires): %s",
                ticket.request_id or "-",
                ticket.id,
                exc,
            )


def _pair_prices(config: Config) -> dict[tuple[str, str], ModelPrice]:
    """The configured price of each (provider, upstream model) pair that a priced model
    targets, for requests that address the pair directly (`provider/model`) or through a
    model without a price of its own; a pair that two models price differently takes the
    dearer price (a client chooses its spelling: it must not choose the cheaper one)."""
    pairs: dict[tuple[str, str], ModelPrice] = {}
    for model in config.models:
        if model.price is None:
            continue
        price = ModelPrice.of(model.price)
        for target in model.targets:
            pair = (target.provider, target.model)
            known = pairs.get(pair)
            if known is None or (price.output, price.input) > (known.output, known.input):
                pairs[pair] = price
    return pairs


def _metered(record: KeyRecord) -> bool:
    """A key whose limits are counted in money or tokens: only priced models may run on it."""
    return record.budget_nanos is not None or record.tpm is not None


def _not_priced(model: str) -> PermissionDenied:
    return PermissionDenied(
        f"The model '{model}' has no price, and this key has a budget or a token limit: "
        "it may only use priced models (an operator sets models[].price)",
        param="model",
        code="model_not_priced",
    )


def _refuse_dead_key(record: KeyRecord, now: float) -> None:
    if record.revoked:
        raise AuthenticationFailed("This API key has been revoked", code="key_revoked")
    if record.expires_at is not None and now >= record.expires_at:
        raise AuthenticationFailed("This API key has expired", code="key_expired")


ACCOUNTING = web.AppKey("accounting", Accounting)
