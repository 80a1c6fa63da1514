import sys

from tests.vm.host import main

sys.exit(main())
