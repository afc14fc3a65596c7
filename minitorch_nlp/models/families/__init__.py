"""How each model family meets the rest of the library, one module per family: its HuggingFace
key map and ``io.huggingface.register_architecture`` calls, and its ``models.registry``
registration (what training, the command line and generation need). ``models.registry`` imports
every module here, so a family is known as soon as the registry is first read; the model modules
themselves hold only the paper's classes."""
