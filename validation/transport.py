"""The reference's messages over torch.distributed point-to-point (gloo, loopback).

A message is ONE float32 tensor sent with one dist.send: a header of HEADER int64 fields
(stored in its first HEADER_SLOTS float32 slots) followed by the payload (parameters,
gradient or model; empty for control messages). Its length varies with the payload; the
receiver posts a receive of the largest size (gloo accepts a message shorter than the
posted buffer: tcp/pair.cc enforces length <= posted bytes) and reads the payload's
length from the header.

Gloo's point-to-point is a rendezvous: a send completes only once the receiver has posted
the matching receive. So every process keeps one receiver thread that always has a
receive posted and hands each message to its main thread through a queue: a sender never
waits on a busy receiver's main loop, only on the transport, and a worker's main thread
can wait out its step while watching for a cancel. Every receive names its source: a
worker's receiver takes rank 0's messages, and the server has one receiver per worker
(a receive from any rank, which gloo supports, makes each message wait for a
notification round trip: 2-8 ms instead of 0.2 ms on a loaded 2-core machine). A
posted receive is announced to the sender ahead, so a message goes out as soon as it is
sent. One thread receives per (sender, receiver) pair and a sender sends one message at
a time, so messages between two ranks arrive in the order they were sent.

Times are nanoseconds of the machine's CLOCK_MONOTONIC (time.monotonic_ns, shared by every
process on the host) minus the run's start, which rank 0 takes and broadcasts.
"""

import queue
import threading
import time

import torch
import torch.distributed as dist

TAG = 1

# Header fields (int64 each).
H_KIND, H_SRC, H_JOB, H_STEP, H_VERSION, H_ELEMENTS, H_T_SEND, H_SEQ = range(8)
HEADER = 8
HEADER_SLOTS = HEADER * 2  # float32 slots holding the int64 header
HEADER_BYTES = HEADER * 8

# Message kinds. server -> worker:
PARAMS = 1  # payload: parameters (or, for easgd, the center the exchange read); version
CANCEL = 2  # no payload; job = the job cancelled
STOP = 3  # no payload; the last message a worker receives
# worker -> server:
PUSH_GRAD = 4  # payload: the gradient of job `job`, computed at version `version`
PUSH_MODEL = 5  # payload: the worker's parameters (local_sgd, diloco, easgd)
BYE = 6  # no payload; the last message a worker sends (answer to STOP)

KIND_NAMES = {PARAMS: "params", CANCEL: "cancel", STOP: "stop", PUSH_GRAD: "push_grad",
              PUSH_MODEL: "push_model", BYE: "bye"}


class TransportError(RuntimeError):
    pass


class Clock:
    """Nanoseconds since the run's start, on the shared monotonic clock."""

    def __init__(self, t0_ns):
        self.t0_ns = t0_ns

    def now(self):
        return time.monotonic_ns() - self.t0_ns


def agree_on_start(rank, clock):
    """Sets clock's origin, on every rank, to rank 0's monotonic_ns at this moment (a
    broadcast, so every process is connected and ready): the run's time origin."""
    t0 = torch.tensor([time.monotonic_ns() if rank == 0 else 0], dtype=torch.int64)
    dist.broadcast(t0, src=0)
    clock.t0_ns = int(t0[0])


class Message:
    __slots__ = ("kind", "src", "dst", "job", "step", "version", "payload", "t_send", "t_recv",
                 "seq", "bytes")

    def __init__(self, header, payload, dst, t_recv):
        h = header.tolist()
        self.kind, self.src, self.job, self.step = h[H_KIND], h[H_SRC], h[H_JOB], h[H_STEP]
        self.version, self.t_send, self.seq = h[H_VERSION], h[H_T_SEND], h[H_SEQ]
        self.payload, self.dst, self.t_recv = payload, dst, t_recv
        self.bytes = HEADER_BYTES + 4 * (payload.numel() if payload is not None else 0)


class Sender:
    """Sends this rank's messages, numbering them (seq) in sending order. One message
    buffer, reused: a send returns only when gloo is done with it."""

    def __init__(self, rank, clock, max_elements):
        self.rank, self.clock, self.seq = rank, clock, 0
        self.buffer = torch.empty(HEADER_SLOTS + max_elements, dtype=torch.float32)
        self.header = self.buffer[:HEADER_SLOTS].view(torch.int64)

    def send(self, dst, kind, job=0, step=0, version=0, payload=None):
        """Blocks until the receiver has the message (gloo's rendezvous); returns t_send,
        stamped when the send begins (before the payload is copied into the message)."""
        t_send = self.clock.now()
        n = payload.numel() if payload is not None else 0
        if n:
            self.buffer[HEADER_SLOTS:HEADER_SLOTS + n].copy_(payload)
        h = self.header
        h[H_KIND], h[H_SRC], h[H_JOB], h[H_STEP], h[H_VERSION] = kind, self.rank, job, step, version
        h[H_ELEMENTS], h[H_SEQ], h[H_T_SEND] = n, self.seq, t_send
        self.seq += 1
        dist.send(self.buffer[:HEADER_SLOTS + n], dst=dst, tag=TAG)
        return t_send


class Receiver(threading.Thread):
    """Receives every message rank `src` sends to this rank and puts it, stamped with
    t_recv (the whole message is in memory), on `inbox` (its own, or one shared with other
    receivers). Ends after `last` has returned True for a message; a transport failure
    (gloo's timeout included) is put on the inbox as a TransportError, which the reader
    raises."""

    def __init__(self, rank, clock, src, last, max_elements, inbox=None):
        super().__init__(daemon=True, name=f"receiver-{rank}-from-{src}")
        self.rank, self.clock, self.src, self.last = rank, clock, src, last
        self.max_elements = max_elements
        self.inbox = inbox if inbox is not None else queue.Queue()

    def run(self):
        try:
            while True:
                buffer = torch.empty(HEADER_SLOTS + self.max_elements, dtype=torch.float32)
                dist.recv(buffer, src=self.src, tag=TAG)
                t_recv = self.clock.now()
                header = buffer[:HEADER_SLOTS].view(torch.int64)
                n = int(header[H_ELEMENTS])
                if not 0 <= n <= self.max_elements:
                    raise TransportError(f"rank {self.rank}: a message from rank {int(header[H_SRC])} "
                                         f"announces {n} elements (at most {self.max_elements})")
                payload = buffer[HEADER_SLOTS:HEADER_SLOTS + n] if n else None
                message = Message(header, payload, self.rank, t_recv)
                self.inbox.put(message)
                if self.last(message):
                    return
        except Exception as e:  # noqa: BLE001 -- handed to the main thread, which fails
            self.inbox.put(TransportError(f"rank {self.rank}: receiving failed: {e}"))

    def get(self, timeout_s):
        """The next message; TransportError on a receive failure or after timeout_s."""
        try:
            item = self.inbox.get(timeout=timeout_s)
        except queue.Empty:
            raise TransportError(f"rank {self.rank}: no message for {timeout_s:g} s") from None
        if isinstance(item, Exception):
            raise item
        return item

    def poll(self, timeout_s):
        """The next message if one comes within timeout_s, else None."""
        try:
            item = self.inbox.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise item
        return item
