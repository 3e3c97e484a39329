package v1beta1

// Hub marks MySQLCluster as the version every other version converts through.
func (*MySQLCluster) Hub() {}

// Hub marks MySQLBackup as the version every other version converts through.
func (*MySQLBackup) Hub() {}

// Hub marks MySQLUser as the version every other version converts through.
func (*MySQLUser) Hub() {}

// Hub marks MySQLDatabase as the version every other version converts through.
func (*MySQLDatabase) Hub() {}
