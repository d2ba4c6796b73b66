"""A delaying, bandwidth-capping TCP proxy: the network between a trainer and object storage.

This kernel has `tc` with htb and tbf but no netem, so delay is added here: every piece of data
that crosses the proxy, either way, is delivered `delay` seconds after it arrived (in order, per
connection), and what the server sends back shares one token bucket of `rate` bytes/s (the
link's bandwidth). A small GET then takes two one-way delays plus the server's time, as S3's time
to first byte does. The proxy also counts the HTTP requests that cross it (request lines seen at
the start of the client's data or after a blank line) by method, and the bytes each way, so
loaders that do not say how many requests they make (s3fs, rclone) are measured alike.

Runs on its own asyncio loop in a background thread of the bench: `Link(...).start()`, then
`.stats()` at any time, `.stop()` at the end.
"""
import asyncio
import re
import threading
import time

REQUEST_LINE = re.compile(rb"(?:^|\r\n\r\n)(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.[01]\r\n")


class Link:
    def __init__(self, target_host, target_port, delay=0.010, rate=125e6, listen_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.delay = delay
        self.rate = rate
        self.listen_host = listen_host
        self.port = None
        self.counts = {"GET": 0, "HEAD": 0, "PUT": 0, "POST": 0, "DELETE": 0, "LIST": 0}
        self.bytes_down = 0
        self.bytes_up = 0
        self._next_free = 0.0
        self._lock = threading.Lock()
        self._loop = None
        self._server = None
        self._thread = None

    # ---------------------------------------------------------------- control

    def start(self):
        ready = threading.Event()

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, self.listen_host, 0, limit=2**20))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self):
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    @property
    def endpoint(self):
        return f"http://{self.listen_host}:{self.port}"

    def stats(self):
        with self._lock:
            return {**self.counts, "bytesDown": self.bytes_down, "bytesUp": self.bytes_up}

    # ---------------------------------------------------------------- data

    async def _serve(self, client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target, limit=2**20)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(self._pipe(client_reader, server_writer, up=True), self._pipe(server_reader, client_writer, up=False),
                             return_exceptions=True)

    async def _pipe(self, reader, writer, up):
        """Reads as data arrives and delivers each piece `delay` later, in order."""
        queue = asyncio.Queue()

        async def deliver():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not up:
                    await self._paced(len(data))
                writer.write(data)
                await writer.drain()
            writer.close()

        delivering = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                self._count(data, up)
                queue.put_nowait((time.monotonic() + self.delay, data))
        finally:
            queue.put_nowait((0, None))
            await asyncio.gather(delivering, return_exceptions=True)

    async def _paced(self, size):
        """The link's bandwidth, shared by every connection: waits until `size` more bytes may pass."""
        now = time.monotonic()
        with self._lock:
            start = max(now, self._next_free)
            self._next_free = start + size / self.rate
        if start > now:
            await asyncio.sleep(start - now)

    def _count(self, data, up):
        with self._lock:
            if up:
                self.bytes_up += len(data)
                for method, target in REQUEST_LINE.findall(data):
                    name = method.decode()
                    # A GET of the bucket itself with a list-type (or no key) is a LIST.
                    if name == "GET" and (b"list-type=" in target or re.match(rb"^/[^/?]+/?(\?|$)", target)):
                        name = "LIST"
                    self.counts[name] += 1
            else:
                self.bytes_down += len(data)
