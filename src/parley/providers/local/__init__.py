"""The embedded local model, run in a worker process the server supervises.

A native library (llama.cpp) must not be able to take the server down, so the model
never runs in the server's process: ``provider.LocalProvider`` (the server side) talks
to ``worker`` (a child process, ``python -m parley.providers.local.worker``) through
``supervisor.WorkerSupervisor``, over pipes carrying the frames of ``protocol``. The
worker loads a model with a ``backend`` (``llama`` by default) and checks it with a
one-token generation before it says it is ready.

This package's ``__init__`` imports nothing, so the worker starts without the server's
dependencies; import the modules themselves.
"""
