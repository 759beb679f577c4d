"""Generated gRPC stubs of the kubelet's plugin-registration and DRA plugin APIs.

The ``.proto`` files beside this module are ours, written from the kubelet's wire format;
``make protos`` regenerates the ``*_pb2*.py``/``.pyi`` files with the pinned grpcio-tools,
and a test checks that regenerating changes nothing.
"""
