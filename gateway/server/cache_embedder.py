"""The response cache's embedder for semantic mode: the question's text embedded with
`cache.semantic.embedding_model` through the gateway's own providers (the same attempts,
failover and key health as a client's /v1/embeddings call).

Its cost is the gateway's, not the asking key's: it is settled in the spend of the master
key and open gateway (`key_id: null` in /admin/spend) under the embedding model, reserves
no key's budget and counts in no key's rate limits. A failed embedding is a semantic miss
(logged), never the request's error.
"""

from __future__ import annotations

import logging
import time

from gateway.accounting.prices import cost_nanos
from gateway.accounting.service import Accounting
from gateway.cache.semantic import Matrix
from gateway.cache.semantic import unit
from gateway.errors import GatewayError
from gateway.providers.embeddings import parse_input
from gateway.server.embeddings import EmbeddingsRun
from gateway.server.state import GatewayState
from gateway.store.kv import StoreError
from gateway.store.ledger import Charge
from gateway.wire.openai_chat import Usage

log = logging.getLogger("gateway.cache")


class CacheEmbedder:
    def __init__(self, state: GatewayState, accounting: Accounting, model: str) -> None:
        self._state = state
        self._accounting = accounting
        self._model = model

    async def __call__(self, text: str) -> Matrix | None:
        state, model = self._state, self._model
        run = EmbeddingsRun(
            state=state,
            request_id=state.new_request_id(),
            body={"model": model, "input": [text]},
            inputs=parse_input([text]),
            dimensions=None,
            base64=False,
            model=model,
        )
        try:
            await run.serve()
        except GatewayError as err:
            log.warning("response cache: the question was not embedded (a miss): %s", err)
            return None
        await self._charge(run)
        return unit(run.vectors[0]) if run.vectors else None

    async def _charge(self, run: EmbeddingsRun) -> None:
        attempt, usage = run.attempt, run.usage
        if attempt is None or usage is None:
            return
        accounting = self._accounting
        price = accounting.price(self._model, accounting.target(attempt.provider, attempt.model))
        tokens = usage.prompt_tokens
        cost = cost_nanos(Usage(prompt_tokens=tokens, total_tokens=tokens), price) if price else 0
        charge = Charge(
            key_id="",
            model=self._model,
            cost_nanos=cost,
            input_tokens=tokens,
            output_tokens=0,
            estimated=False,
            now=time.time(),
        )
        try:
            await accounting.ledger.settle(charge)
        except StoreError as exc:
            log.warning("response cache: an embedding's cost not settled: %s", type(exc).__name__)
