"""The ``tfxla`` subcommands: one module per subcommand, each with ``register(subparsers)``.

``tfxla_plugin.cli`` imports the modules listed in ``COMMANDS`` and lets each add its parser
(with ``set_defaults(func=...)``); a module imports heavy dependencies (TensorFlow) only inside
its command function, so ``tfxla --help`` stays fast.
"""

COMMANDS = ("hlo", "wrap", "tensorboard", "models", "run", "show", "serve", "cache")
