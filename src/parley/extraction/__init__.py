"""Reading documents out of process: chat attachments and knowledge-base uploads are
turned into text by reader processes the server supervises, never on the event loop or
in one of its threads.

- ``pool.py``: the reader processes (started on demand, kept warm, killed and replaced
  when a document runs past its deadline, its request is cancelled, or one crashes);
- ``slots.py``: who may read now (a bound in all, a smaller one per owner);
- ``protocol.py``: the frames between the server and a reader;
- ``worker.py`` and ``readers.py``: the reader process and what it runs;
- ``clients.py``: the pool as the chat's ``DocumentReader`` and the knowledge
  ingestion's extractor;
- ``settings.py``: the ``documents`` section of the settings.
"""
