"""Transformers: rewrites of messages on their way to the model or back from it.

Two kinds, never mixed:

- **Input transformers** (``input.py`` and the steps it re-exports: ``reminders.py``,
  ``injection.py``, ``attachments.py``, ``templates.py``, ``retrieval.py``;
  ``prompt.py`` assembles the system prompt) shape only the outgoing request: they add
  context (time, documents as text, retrieved knowledge) to the copy of the history
  sent to the model. The stored conversation never sees their output.
- **Output transformers** (``output.py``, ``images.py``) shape the reply: regex rules
  rewrite what is stored (``display_only=False``) or only what is shown
  (``display_only=True``), and when the reply is finished its base64 images are saved
  as files and linked by URL.

What does not belong here: deciding when a transformer runs and with which settings
(``conversations/``), HTTP routes (``api/``), persistence (``store/``), turning
documents into text (``parley.documents``), think tags (read as reasoning by
``agent/stream.py`` on every reply). Output transformers are synchronous
and pure except ``images.py`` (image files); input transformers are async, since some
read files (documents, the workspace) or ask a retriever.
"""
