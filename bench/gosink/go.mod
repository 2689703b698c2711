module gosink
go 1.19
