"""A terminal client for the tests: GET …/terminal over WebSocket with
Debian's python3-websockets (asyncio), driven from synchronous tests by
one event loop per test."""
import asyncio
import json
import re

import websockets


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Term:
    """One connected client: output bytes kept in .screen, text messages
    in .messages (the ready message first)."""

    def __init__(self, ws):
        self.ws = ws
        self.screen = b""
        self.messages = []
        self.closed = None  # the close code, once closed

    @classmethod
    async def open(cls, daemon, sb, **params):
        q = "&".join(f"{k}={v}" for k, v in {"generation": sb.generation, **params}.items())
        url = f"ws://127.0.0.1:{daemon.port}/api/v1/sandboxes/{sb.id}/terminal?{q}"
        ws = await websockets.connect(url, extra_headers={"Authorization": f"Bearer {daemon.token}"},
                                      max_size=2**22, ping_interval=None)
        t = cls(ws)
        ready = json.loads(await ws.recv())
        assert ready["type"] == "ready", ready
        t.messages.append(ready)
        return t

    @property
    def ready(self):
        return self.messages[0]

    async def type(self, text):
        await self.ws.send(text.encode() if isinstance(text, str) else text)

    async def send_json(self, doc):
        await self.ws.send(json.dumps(doc))

    async def resize(self, cols, rows):
        await self.send_json({"type": "resize", "cols": cols, "rows": rows})

    async def _one(self, timeout):
        try:
            m = await asyncio.wait_for(self.ws.recv(), timeout)
        except websockets.ConnectionClosed as e:
            self.closed = e.code
            return False
        if isinstance(m, bytes):
            self.screen += m
        else:
            self.messages.append(json.loads(m))
        return True

    async def until(self, pattern, timeout=15, start=0):
        """Read until the screen (from byte `start`) matches pattern (a
        regex on bytes); the match."""
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            m = rx.search(self.screen, start)
            if m:
                return m
            left = deadline - loop.time()
            if left <= 0 or self.closed is not None:
                raise AssertionError(f"{pattern!r} not on the screen: {self.screen[-800:]!r}")
            try:
                await self._one(left)
            except asyncio.TimeoutError:
                pass

    async def message(self, kind, timeout=15):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for m in self.messages:
                if m.get("type") == kind:
                    return m
            left = deadline - loop.time()
            if left <= 0 or self.closed is not None:
                raise AssertionError(f"no {kind} message: {self.messages!r}")
            try:
                await self._one(left)
            except asyncio.TimeoutError:
                pass

    async def drain_until_closed(self, timeout=15):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.closed is None:
            left = deadline - loop.time()
            assert left > 0, "the terminal did not close"
            try:
                await self._one(left)
            except asyncio.TimeoutError:
                pass
        return self.closed

    async def close(self):
        await self.ws.close()
