# IPython profile for the kernels that nbval starts (conftest.py points IPYTHONDIR here).
# It only drops ipykernel's start-up warning "Kernel is running over TCP without encryption":
# the tests' kernels listen on the loopback interface of the machine that runs them, and the
# warning, printed once per notebook, would bury the test output.
import logging


class _DropUnencryptedTcpWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "without encryption" not in record.getMessage()


logging.getLogger("IPKernelApp").addFilter(_DropUnencryptedTcpWarning())
