"""``python -m kubectl_kvreset`` runs the CLI."""

from kubectl_kvreset.cli import main

if __name__ == "__main__":
    main()
