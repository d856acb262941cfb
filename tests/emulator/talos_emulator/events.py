# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-boot runtime event buffer behind MachineService/Events.

machined keeps events in memory, so a reboot starts a fresh buffer. Each
event's ``data`` is an Any whose type URL is ``talos/runtime/machine.<Name>``.
"""

import asyncio
import itertools
import os
import time

from google.protobuf import any_pb2

from ansible_collections.talos_linux.talos.plugins.module_utils.talos_api.machine import machine_pb2

_XID_ALPHABET = "0123456789abcdefghijklmnopqrstuv"
_XID_MACHINE = os.urandom(3)
_xid_counter = itertools.count(int.from_bytes(os.urandom(3), "big"))


def _event_id():
    """An xid (github.com/rs/xid, what machined names events with): 4 bytes of Unix time, 3 of machine, 2 of process
    and a 3-byte counter, in 20 characters of base32hex; IDs sort by time."""
    raw = (int(time.time()).to_bytes(4, "big") + _XID_MACHINE + (os.getpid() & 0xFFFF).to_bytes(2, "big")
           + (next(_xid_counter) & 0xFFFFFF).to_bytes(3, "big"))
    number = int.from_bytes(raw, "big") << 4  # 96 bits padded to 100: 20 characters of 5 bits
    return "".join(_XID_ALPHABET[(number >> shift) & 31] for shift in range(95, -1, -5))


def pack(message):
    return any_pb2.Any(type_url="talos/runtime/machine." + message.DESCRIPTOR.name, value=message.SerializeToString())


class EventLog:
    def __init__(self):
        self._events = []
        self._subscribers = set()

    def emit(self, message, actor_id=""):
        event = machine_pb2.Event(id=_event_id(), actor_id=actor_id, data=pack(message))
        self._events.append((time.time(), event))
        for queue in list(self._subscribers):
            queue.put_nowait(event)
        return event

    def history(self, tail_events=0, tail_id="", tail_seconds=0):
        """Past events a new subscriber asked for (tail_events -1 = all)."""
        events = self._events
        if tail_id:
            # Talos compares xids, which sort by time: the events after ``tail_id``, also one of an earlier boot.
            events = [(stamp, event) for stamp, event in events if event.id > tail_id]
        elif tail_seconds:
            since = time.time() - tail_seconds
            events = [(stamp, event) for stamp, event in events if stamp >= since]
        elif tail_events >= 0:
            events = events[len(events) - tail_events:] if tail_events else []
        return [event for _stamp, event in events]

    def subscribe(self):
        queue = asyncio.Queue()
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue):
        self._subscribers.discard(queue)
