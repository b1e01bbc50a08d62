"""The app's tabs: ``models_data`` (models and data), then one module per paper of :mod:`core.papers`
(``ui/tabs/<paper>.py``, each ``TITLE`` and ``build(ctx)``), and the sections a tab builds into itself
(``neuzip_training``: NeuZip's training comparison; ``batch`` and ``layers``: MambaLRP's batch runs and its
per-layer flow). :func:`ui.tab_modules` lists the tab modules in the order the app shows them."""
