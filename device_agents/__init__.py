"""The edgekit on-device agent and its host client.

Runs on small devices with Python 3.9+, numpy, pyserial (serial links only) and one inference
runtime; it imports nothing else of edgekit, so ``edgekit agent build`` can ship this package alone
as a zipapp. Modules: ``protocol`` (frames and messages), ``link`` (serial/TCP/pty links, ack and
retransmission), ``agent`` (the server), ``store`` (uploads and bundles), ``runtimes`` (TFLite and
OpenVINO runners), ``client`` (``connect(url)`` on the host), ``bundle`` (the bundle format),
``errors``. See ``docs/protocol.md``.
"""
