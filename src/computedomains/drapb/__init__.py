"""The kubelet's plugin-registration and DRA plugin gRPC APIs.

The ``.proto`` files beside this module are ours, written from the kubelet's wire format;
``make protos`` regenerates their message modules (``*_pb2.py``/``.pyi``) with the pinned
grpcio-tools, and a test checks that regenerating changes nothing. ``services`` serves and
calls both services over those messages.
"""
