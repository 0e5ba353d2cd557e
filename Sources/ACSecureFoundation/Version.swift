/// This library's version (`+[AppConnect version]`), for an About page or a support report.
///
/// The one place the package's version is set (MAJOR.MINOR.PATCH). Everything else takes it from
/// this line: `acsecure --version`, and through scripts/version.sh the C libraries that
/// scripts/install-c-library.sh installs (file names libACSecureFile.so.VERSION and
/// libACSecureSQLite.so.VERSION, SONAMEs .so.MAJOR) and the `Version:` of acsecurefile.pc and
/// acsecuresqlite.pc. scripts/test-c.sh and 30-cli.sh check that they agree.
public let ACSecureFileKitVersion = "1.0.0"
