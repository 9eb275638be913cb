"""Entry point of the emulator process started by :class:`SlaveChainProcess`:
``python -m twin.ethercat.child FD`` where FD is its end of a socketpair."""
import socket
import sys
from multiprocessing.connection import Connection

from .server import run_child

if __name__ == "__main__":
    fd = int(sys.argv[1])
    run_child(Connection(socket.socket(fileno=fd).detach()))
