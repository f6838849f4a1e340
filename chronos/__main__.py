from chronos.cli import main

raise SystemExit(main())
