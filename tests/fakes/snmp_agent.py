"""A bare SNMP v2c agent on 127.0.0.1 for what snmpsim cannot do: answers held back or sent twice.

Every GET is answered with the number of requests received so far as the value of each OID asked,
so a reading says which request it answers. `late` maps a request's number to how long its answer
is held back; `stale` sends, before each answer, the previous answer again (its request id, with
99999 as its value): what a late or duplicated datagram from the network looks like.
"""

from __future__ import annotations

import socket
import threading

from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
STALE_VALUE = 99999


class BareAgent(threading.Thread):
    def __init__(self, late: dict[int, float] | None = None, stale: bool = False) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.late, self.stale = late or {}, stale
        self.requests = 0
        self.stale_sent = 0

    def _answer(self, request, value: int):
        answer = V2C.apiMessage.get_response(request)
        binds = V2C.apiPDU.get_varbinds(V2C.apiMessage.get_pdu(request))
        V2C.apiPDU.set_varbinds(
            V2C.apiMessage.get_pdu(answer), [(oid, V2C.Integer(value)) for oid, _ in binds]
        )
        return encoder.encode(answer)

    def run(self) -> None:
        previous = None
        while True:
            try:
                data, addr = self.sock.recvfrom(65535)
            except OSError:  # closed by stop()
                return
            self.requests += 1
            request, _ = decoder.decode(data, asn1Spec=V2C.Message())
            if self.stale and previous is not None:
                self.sock.sendto(self._answer(previous, STALE_VALUE), addr)
                self.stale_sent += 1
            out = self._answer(request, self.requests)
            delay = self.late.get(self.requests, 0.0)
            if delay:
                threading.Timer(delay, self.sock.sendto, (out, addr)).start()
            else:
                self.sock.sendto(out, addr)
            previous = request

    def stop(self) -> None:
        self.sock.close()
