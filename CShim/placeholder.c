#include "ACSecureFile.h"
