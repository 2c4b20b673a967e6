"""Transformers: pure rewrites of messages on their way to the model or back from it.

Two kinds, never mixed:

- **Input transformers** (``input.py``, ``documents.py``) shape only the outgoing
  request: they add context (time, documents as text, retrieved knowledge) to the copy
  of the history sent to the model. The stored conversation never sees their output.
- **Output transformers** (``output.py``, ``images.py``) shape the reply: think tags
  become reasoning while it streams, regex rules rewrite what is stored
  (``display_only=False``) or only what is shown (``display_only=True``), and when the
  reply is finished its base64 images are saved as files and linked by URL.

What does not belong here: deciding when a transformer runs and with which settings
(``conversations/``), HTTP routes (``api/``), persistence (``store/``). Everything here
is synchronous and free of I/O, except ``images.py``, which writes and finds image files.
"""
