#ifndef CACSYSTEMSQLITE_SHIM_H
#define CACSYSTEMSQLITE_SHIM_H
#include <sqlite3.h>
#endif
