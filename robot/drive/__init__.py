"""One CiA 402 drive as the master sees it: the state machine and control words (`cia402`), the
PDO codec compiled once per layout (`pdo`), unit conversion between counts and SI (`units`) and
the checks of what a drive reports at bring-up against the configuration (`drivecheck`: units,
rated torque, SDO abort codes in words), and the drives' own stop and fault reactions written at
bring-up (`reactions`). No bus access here; `robot.bus` does the I/O."""
