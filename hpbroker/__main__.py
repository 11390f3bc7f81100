from hpbroker.cli.main import main

raise SystemExit(main())
